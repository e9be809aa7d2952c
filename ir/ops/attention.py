"""Attention ops (filled in by the pattern-recognition work of issue 6)."""
