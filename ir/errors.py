"""The error an op's rules raise, shared by the op registry and the symbolic dims it computes with."""


class OpError(Exception):
    """An op's operands or attributes break one of its rules; the message names the rule."""
