"""``--convert-opset N``: onnx.version_converter as a verified whole-model step.

Why: TensorRT's parsers take any opset but were written for 7 and later (``ModelImporter.cpp``
warns "TensorRT supports ONNX graphs generated with at least opset 7. Models using older opsets
are not guaranteed to work", 7.0 ... 10.1-GA) and the 10.x operator tables start at opset 9:
importers read each op's attributes and inputs as the opsets they know define them (an opset-6
BatchNormalization's ``spatial``, Upsample's attribute scales). Converting the model with ONNX's
own adapters writes the newer op versions; graphfix verifies the converted model against the
original on onnxruntime and keeps it only when they agree (``steps._whole_model_step``).
"""

from __future__ import annotations

import onnx
import onnx.version_converter

from graphfix.errors import first_line
from graphfix.onnxio.ir import default_opset


class ConvertFailed(Exception):
    """onnx.version_converter has no adapter for an op of the model, or failed otherwise."""


def convert(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """``model`` at default-domain opset ``target`` (the same model when it is already there)."""
    if default_opset(model) == target:
        return model
    try:
        return onnx.version_converter.convert_version(model, target)
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError, ValueError, ...
        raise ConvertFailed(first_line(exc)) from exc
