"""Test-only pass plugins, loaded with --load-pass-plugin=FILE.py (never registered by the package)."""
