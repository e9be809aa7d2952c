"""Fuzzing: random valid ONNX graphs compared with onnxruntime, and mutated `.tsl` texts for the parser."""
