"""Debugging aids for the compiler itself: the test-case reducer (`tessel-reduce`) and the determinism
check (`--check-determinism`). Library code: nothing here prints or imports tessel.cli."""
