"""ONNX converters (being written)."""
