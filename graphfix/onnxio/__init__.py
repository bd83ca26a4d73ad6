"""ONNX files: IR versions, proto basics, validation, external data, paths, load, save."""
