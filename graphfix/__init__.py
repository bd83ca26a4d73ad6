"""graphfix: make PyTorch ONNX exports pass TensorRT's ONNX parser, one verified rewrite at a time.

The API names load lazily: ``import graphfix`` (and the CLI's start) stays light, so an early
Ctrl-C is already inside the CLI's handlers instead of in the middle of importing onnxruntime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphfix.errors import GraphfixError

__version__ = "0.1.0"

if TYPE_CHECKING:
    from graphfix.api import FixResult, fix
    from graphfix.passes import all_passes, get

_LAZY = {"FixResult": "graphfix.api", "fix": "graphfix.api", "all_passes": "graphfix.passes", "get": "graphfix.passes"}

__all__ = ["FixResult", "GraphfixError", "__version__", "all_passes", "fix", "get"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'graphfix' has no attribute {name!r}")
