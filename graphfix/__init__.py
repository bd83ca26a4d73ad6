"""graphfix: make PyTorch ONNX exports pass TensorRT's ONNX parser, one verified rewrite at a time."""

__version__ = "0.1.0"

from graphfix.api import FixResult, fix  # noqa: E402
from graphfix.errors import GraphfixError  # noqa: E402
from graphfix.passes import all_passes, get  # noqa: E402

__all__ = ["FixResult", "GraphfixError", "__version__", "all_passes", "fix", "get"]
