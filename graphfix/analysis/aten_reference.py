"""Reference implementations of the ATen ops graphfix rewrites, for verifying models that have them.

``torch.onnx.export(..., operator_export_type=ONNX_ATEN_FALLBACK)`` writes ``ATen`` nodes
(domain ``org.pytorch.aten``, string attribute ``operator``, often ``overload_name``) that
onnxruntime cannot run, so the *baseline* of such a model cannot come from onnxruntime. This
module runs it on ``onnx.reference.ReferenceEvaluator`` with numpy implementations of those ops,
written from PyTorch's definitions (adaptive pooling bins ``[floor(i*in/out), ceil((i+1)*in/out))``,
biased variance in the norms, ``min(max(x, lo), hi)`` for clamp) and computed in float64.

Two node forms exist and both are read: the TorchScript exporter's (every argument an input:
scalars and int lists as Constant tensors, ``None`` as an empty input) and the older Caffe2-era
one (tensors as inputs, the other arguments as attributes named after the ATen schema, e.g.
``normalized_shape``/``eps`` on ``layer_norm``). :data:`ATEN_SIGNATURES` is the schema both the
reference and the ``aten-fallback`` pass bind arguments with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_loop import Loop as _ReferenceLoop

ATEN_DOMAIN = "org.pytorch.aten"
TENSOR, OPTIONAL, INTS, INT, FLOAT, BOOL, SCALAR = "Tensor", "Tensor?", "int[]", "int", "float", "bool", "Scalar?"

_POOL = (("self", TENSOR), ("output_size", INTS))
_CLAMP = (("self", TENSOR), ("min", SCALAR), ("max", SCALAR))
#: ATen operator -> (argument name, kind) in schema order (torch/csrc native_functions.yaml).
ATEN_SIGNATURES: dict[str, tuple[tuple[str, str], ...]] = {
    **{f"{prefix}adaptive_{kind}_pool{n}d": _POOL for prefix in ("", "_") for kind in ("avg", "max") for n in (1, 2, 3)},
    "layer_norm": (("input", TENSOR), ("normalized_shape", INTS), ("weight", OPTIONAL), ("bias", OPTIONAL), ("eps", FLOAT),
                   ("cudnn_enable", BOOL)),
    "group_norm": (("input", TENSOR), ("num_groups", INT), ("weight", OPTIONAL), ("bias", OPTIONAL), ("eps", FLOAT),
                   ("cudnn_enabled", BOOL)),
    "instance_norm": (("input", TENSOR), ("weight", OPTIONAL), ("bias", OPTIONAL), ("running_mean", OPTIONAL),
                      ("running_var", OPTIONAL), ("use_input_stats", BOOL), ("momentum", FLOAT), ("eps", FLOAT),
                      ("cudnn_enabled", BOOL)),
    "clamp": _CLAMP, "clip": _CLAMP,
    "pixel_shuffle": (("self", TENSOR), ("upscale_factor", INT)),
    "pixel_unshuffle": (("self", TENSOR), ("downscale_factor", INT)),
}
#: Defaults of trailing arguments an exporter may leave out.
DEFAULTS: dict[str, Any] = {"eps": 1e-5, "cudnn_enable": True, "cudnn_enabled": True, "momentum": 0.1, "use_input_stats": True}


def operator_name(attrs: dict[str, Any]) -> str:
    """The ATen operator of a node's attributes, without an ``aten::`` prefix."""
    op = attrs.get("operator", "")
    op = op.decode() if isinstance(op, bytes) else str(op)
    return op.split("::")[-1]


def bind_arguments(operator: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """Schema argument -> value: an attribute of that name if the node has one (old form), else the
    next input (``None`` for an empty one), else the default. Raises KeyError for unknown ops."""
    bound: dict[str, Any] = {}
    pending = list(inputs)
    for name, _kind in ATEN_SIGNATURES[operator]:
        if name in attrs:
            bound[name] = attrs[name]
        elif pending:
            bound[name] = pending.pop(0)
        else:
            bound[name] = DEFAULTS.get(name)
    return bound


def scalar(value: Any) -> Any:
    """A Python number from an attribute or a 0-d/1-element tensor (None stays None)."""
    if value is None:
        return None
    arr = np.asarray(value)
    return arr.reshape(-1)[0].item() if arr.size == 1 else arr.tolist()


def int_list(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


# ------------------------------------------------------------------ numpy kernels
def pool_bins(in_size: int, out_size: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows along one axis: [floor(i*in/out), ceil((i+1)*in/out))."""
    return [((i * in_size) // out_size, -((-(i + 1) * in_size) // out_size)) for i in range(out_size)]


def adaptive_pool(x: np.ndarray, output_size: Sequence[int], mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive avg/max pooling over the last ``len(output_size)`` axes; max also gives PyTorch's
    indices (flat position in the input's spatial plane, first maximum in row-major order)."""
    n = len(output_size)
    spatial = x.shape[-n:]
    lead = x.shape[:-n]
    bins = [pool_bins(i, o) for i, o in zip(spatial, output_size, strict=True)]
    values = np.zeros((*lead, *output_size), np.float64)
    indices = np.zeros((*lead, *output_size), np.int64)
    flat_index = np.arange(math.prod(spatial)).reshape(spatial)
    for pos in np.ndindex(*output_size):
        window = tuple(slice(*bins[a][p]) for a, p in enumerate(pos))
        block = x[(..., *window)].astype(np.float64).reshape(*lead, -1)
        if mode == "avg":
            values[(..., *pos)] = block.mean(axis=-1)
        else:
            arg = block.argmax(axis=-1)
            values[(..., *pos)] = np.take_along_axis(block, arg[..., None], -1)[..., 0]
            indices[(..., *pos)] = flat_index[window].reshape(-1)[arg]
    return values.astype(x.dtype), indices


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps)


def _channel_affine(y: np.ndarray, weight: Any, bias: Any, rank: int) -> np.ndarray:
    shape = (-1,) + (1,) * (rank - 2)
    if weight is not None:
        y = y * np.asarray(weight, np.float64).reshape(shape)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(shape)
    return y


def layer_norm(input: np.ndarray, normalized_shape: Any, weight: Any, bias: Any, eps: Any, **_: Any) -> np.ndarray:
    k = len(int_list(normalized_shape))
    y = _normalize(input, tuple(range(input.ndim - k, input.ndim)), float(scalar(eps)))
    if weight is not None:
        y = y * np.asarray(weight, np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return y.astype(input.dtype)


def group_norm(input: np.ndarray, num_groups: Any, weight: Any, bias: Any, eps: Any, **_: Any) -> np.ndarray:
    g = int(scalar(num_groups))
    grouped = input.reshape(input.shape[0], g, -1)
    y = _normalize(grouped, (2,), float(scalar(eps))).reshape(input.shape)
    return _channel_affine(y, weight, bias, input.ndim).astype(input.dtype)


def instance_norm(input: np.ndarray, weight: Any, bias: Any, running_mean: Any, running_var: Any, use_input_stats: Any,
                  eps: Any, **_: Any) -> np.ndarray:
    eps_f = float(scalar(eps))
    if bool(scalar(use_input_stats)):
        y = _normalize(input, tuple(range(2, input.ndim)), eps_f)
    else:
        shape = (-1,) + (1,) * (input.ndim - 2)
        mean = np.asarray(running_mean, np.float64).reshape(shape)
        var = np.asarray(running_var, np.float64).reshape(shape)
        y = (input.astype(np.float64) - mean) / np.sqrt(var + eps_f)
    return _channel_affine(y, weight, bias, input.ndim).astype(input.dtype)


def clamp(self: np.ndarray, min: Any, max: Any, **_: Any) -> np.ndarray:  # noqa: A002 - ATen's names
    y = self
    if min is not None:
        y = np.maximum(y, np.asarray(min).astype(self.dtype))
    if max is not None:
        y = np.minimum(y, np.asarray(max).astype(self.dtype))
    return np.asarray(y, self.dtype)


def pixel_shuffle(self: np.ndarray, upscale_factor: Any, **_: Any) -> np.ndarray:
    r = int(scalar(upscale_factor))
    *lead, c, h, w = self.shape
    y = self.reshape(*lead, c // (r * r), r, r, h, w)
    k = len(lead)
    y = y.transpose(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(self: np.ndarray, downscale_factor: Any, **_: Any) -> np.ndarray:
    r = int(scalar(downscale_factor))
    *lead, c, h, w = self.shape
    y = self.reshape(*lead, c, h // r, r, w // r, r)
    k = len(lead)
    y = y.transpose(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


def _pool_kernel(mode: str) -> Callable[..., tuple[np.ndarray, ...]]:
    def run(self: np.ndarray, output_size: Any, **_: Any) -> tuple[np.ndarray, ...]:
        values, indices = adaptive_pool(self, int_list(output_size), mode)
        return (values, indices) if mode == "max" else (values,)

    return run


KERNELS: dict[str, Callable[..., Any]] = {
    **{f"{prefix}adaptive_{kind}_pool{n}d": _pool_kernel(kind) for prefix in ("", "_") for kind in ("avg", "max") for n in (1, 2, 3)},
    "layer_norm": layer_norm, "group_norm": group_norm, "instance_norm": instance_norm, "clamp": clamp, "clip": clamp,
    "pixel_shuffle": pixel_shuffle, "pixel_unshuffle": pixel_unshuffle,
}


# ------------------------------------------------------------------ evaluator
class ATen(OpRun):
    """``org.pytorch.aten::ATen`` for onnx.reference, dispatching on the ``operator`` attribute."""

    op_domain = ATEN_DOMAIN

    def _run(self, *inputs: Any, **attrs: Any) -> tuple[np.ndarray, ...]:
        operator = operator_name(attrs)
        if operator not in KERNELS:
            raise NotImplementedError(f"graphfix has no reference implementation of aten::{operator}")
        args = bind_arguments(operator, inputs, {k: v for k, v in attrs.items() if k not in ("operator", "overload_name")})
        outs = KERNELS[operator](**args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return tuple(outs[: len(self.onnx_node.output)])


class Loop(_ReferenceLoop):
    """onnx.reference's Loop (onnx 1.23) as the spec has it: an omitted condition means true (it
    ran no iteration) and scan outputs are stacked on a new first axis (it concatenated them
    with ``vstack``). Verification runs a model on the reference where onnxruntime cannot be the
    reference (ATen nodes, a DFT of odd length), bodies included."""

    def _run(self, M, cond, *args, context=None, body=None, attributes=None, bindings=None):  # noqa: N803 - the op's names
        carried = dict(zip(self.body.input_names[2:], args, strict=False))
        if context is not None:
            carried = {**context, **carried}
        cond = np.array(True) if cond is None else cond
        names = self.body.input_names
        scans: list[list[np.ndarray]] = [[] for _ in range(self.K)]
        it = 0
        while bool(np.asarray(cond).reshape(-1)[0]) and (M is None or it < int(np.asarray(M).reshape(-1)[0])):
            inputs = {**carried, names[0]: np.array(it, dtype=np.int64), names[1]: np.asarray(cond)}
            outputs = self._run_body(inputs, attributes=attributes, bindings=bindings)
            cond = outputs[0]
            for k in range(self.K):
                scans[k].append(outputs[1 + self.N + k])
            carried.update(zip(names[2:], outputs[1 : 1 + self.N], strict=True))
            it += 1
        results = [carried[n] for n in names[2:]]
        results.extend(np.stack(s) if s else np.empty((0,), np.float32) for s in scans)
        return self._check_and_fix_outputs(tuple(results))


ATEN_OPS: list[type[OpRun]] = [ATen, Loop]


def evaluator(model: onnx.ModelProto) -> ReferenceEvaluator:
    """An onnx.reference evaluator that runs ATen nodes (``.run(None, feeds)``, like an onnxruntime session)."""
    return ReferenceEvaluator(model, new_ops=ATEN_OPS)


def run_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``model`` (ATen nodes included) on the ONNX reference evaluator; outputs by graph output name."""
    names = [o.name for o in model.graph.output]
    inputs = {i.name for i in model.graph.input}
    results = evaluator(model).run(None, {k: np.asarray(v) for k, v in feeds.items() if k in inputs})
    return dict(zip(names, (np.asarray(r) for r in results), strict=True))


def run_results(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], name: str) -> Any:
    """:func:`run_reference` over every feed, as polygraphy RunResults (what verification compares)."""
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    iterations = [IterationResult(run_reference(model, feed), runner_name=name) for feed in feeds]
    return RunResults([(name, iterations)])
