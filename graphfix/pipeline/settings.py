"""A run's settings and its outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from graphfix.errors import GraphfixError
from graphfix.onnxio.proto import Assembled
from graphfix.passes.base import Pass
from graphfix.report.model import Report
from graphfix.verify import compare
from graphfix.verify import shapes as shapes_mod


class StrictFailure(GraphfixError):
    """--strict: a rewrite would have been rolled back (exit 1, nothing written)."""

    exit_code = 1


@dataclass
class Settings:
    """Every run setting, declared once: the CLI's flags, the API's keywords and the report's "settings"."""

    passes: str | list[str | Pass] | tuple[str | Pass, ...] = "all"
    skip: tuple[str, ...] = ()
    trt: str | None = None
    force: tuple[str, ...] = ()
    verify: bool = True
    verify_each: bool = False
    strict: bool = False
    #: None: automatic (compare.DEFAULT_TOLERANCE, widened to rounding and the model's noise floor)
    atol: float | None = None
    rtol: float | None = None
    seed: int = 1
    iterations: int = 1
    input_shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    #: the TensorRT profile's min/opt/max shapes: verified too where onnxruntime runs them
    profile_shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    #: --fix-shapes: input dims frozen in the written model, shape arithmetic folded (verified)
    fix_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: --set-input: graph inputs frozen to these values (checked and typed: graphfix.pipeline.set_inputs.values),
    #: what follows folded and the Ifs they decide inlined (verified against the original fed them)
    set_inputs: dict[str, np.ndarray] = field(default_factory=dict)
    #: --simplify: onnxsim first, verified and rolled back like a pass (needs graphfix[simplify])
    simplify: bool = False
    #: --convert-opset N: onnx.version_converter to default-domain opset N first, verified like a pass
    convert_opset: int | None = None
    #: --dequantize-dynamic / --requantize-symmetric: the opt-in rewrites that change results
    #: (graphfix.passes.OPT_IN), each a step judged by its own bound (graphfix.pipeline.inexact)
    dequantize_dynamic: bool = False
    requantize_symmetric: bool = False
    val_range: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: --max-memory: the estimated peak bytes of one run at a candidate verification shape
    max_memory: int = shapes_mod.DEFAULT_MAX_MEMORY
    feeds: list[dict[str, np.ndarray]] | None = None
    #: the folder the model's external-data locations are relative to (None: no external data)
    base_dir: str | None = None

    @property
    def tol(self) -> tuple[float, float]:
        """(atol, rtol) in force: the given ones, else compare.DEFAULT_TOLERANCE."""
        return (compare.DEFAULT_TOLERANCE if self.atol is None else self.atol,
                compare.DEFAULT_TOLERANCE if self.rtol is None else self.rtol)

    @property
    def automatic_tolerance(self) -> bool:
        """Neither given: regions allow their own rounding, end to end the model's noise floor."""
        return self.atol is None and self.rtol is None

    def public(self) -> dict[str, Any]:
        return {
            "passes": self.passes if isinstance(self.passes, str) else [getattr(p, "name", p) for p in self.passes],
            "skip": list(self.skip), "trt": self.trt, "force": list(self.force), "verify": self.verify,
            "verify_each": self.verify_each, "strict": self.strict, "atol": self.atol, "rtol": self.rtol,
            "seed": self.seed, "iterations": self.iterations,
            "input_shapes": [{k: list(v) for k, v in s.items()} for s in self.input_shapes],
            "fix_shapes": {k: list(v) for k, v in self.fix_shapes.items()}, "simplify": self.simplify,
            "set_inputs": {k: v.tolist() for k, v in self.set_inputs.items()},
            "convert_opset": self.convert_opset,
            "dequantize_dynamic": self.dequantize_dynamic, "requantize_symmetric": self.requantize_symmetric,
            "val_range": {k: list(v) for k, v in self.val_range.items()}, "max_memory": self.max_memory,
        }


def without_frozen(settings: Settings) -> Settings:
    """The settings for the model --set-input specialised: its frozen inputs are gone, so loaded
    feeds and verification shapes no longer name them."""
    frozen = settings.set_inputs
    return replace(settings,
                   feeds=[{k: v for k, v in f.items() if k not in frozen} for f in settings.feeds] if settings.feeds else settings.feeds,
                   input_shapes=[{k: v for k, v in s.items() if k not in frozen} for s in settings.input_shapes])


@dataclass
class Outcome:
    fixed: onnx.ModelProto | Assembled  # Assembled: the input's weights not copied (save_model streams them)
    report: Report
    feeds: list[dict[str, np.ndarray]]
    baseline: Any = None  # polygraphy RunResults of the input model
    final: Any = None  # RunResults of the returned model
    base_dir: str | None = None  # where the model's external data lives

    @property
    def model(self) -> onnx.ModelProto:
        """The fixed model as one ModelProto (built on first use when its weights are the input's)."""
        return self.fixed.proto() if isinstance(self.fixed, Assembled) else self.fixed
