"""Debugging aids for the compiler itself: the test-case reducer (`tessel-reduce`), the determinism
check (`--check-determinism`), the oracles and translation validation (`--validate-each`, `--bisect`,
validate.py). Library code: nothing here prints or imports tessel.cli."""
