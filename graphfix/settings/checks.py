"""Option checks shared by the CLI and ``graphfix.fix``: refuse, in one line, what would otherwise
fall back silently (an empty pass list running every pass, NaN tolerances switching verification
off, an empty inputs file replaced by random inputs) or fail late with a traceback (negative
seeds, inputs numpy cannot hold, feeds of many gigabytes).

Messages use the CLI's option names; API users read ``--atol`` as ``atol=``.
"""

from __future__ import annotations

import math
import numbers
import os
import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from graphfix.errors import GraphfixError

#: Random inputs graphfix generates (all iterations together) are at most this many bytes.
MAX_FEED_BYTES = 2**31
#: Random input sets (``--iterations``) and worker processes (``check --jobs``) graphfix accepts:
#: beyond these a run is a typo, not a plan (each iteration is one more onnxruntime run per check).
MAX_ITERATIONS, MAX_JOBS = 1000, 256
#: The largest dim graphfix takes in a shape (--input-shapes, --fix-shapes, --trt-*-shapes):
#: TensorRT's dims are int32, and a bigger one fails late (a protobuf or onnxruntime overflow).
MAX_DIM = 2**31 - 1
#: Element types verification can feed and compare: numpy's own numeric types (onnxruntime runs
#: them; polygraphy generates them). Everything else needs --no-verify.
FEEDABLE = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BOOL,
    onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
})
#: Output element types onnxruntime's Python API cannot hand back as numpy arrays.
UNRETURNABLE = frozenset({onnx.TensorProto.BFLOAT16})


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_memory(value: str | int) -> int:
    """``--max-memory``: bytes, or a number with K/M/G/T (binary: 1G = 2**30; ``4G``, ``512MiB``, ``1.5g``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        text = str(value).strip().lower()
        digits = text.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
        number, unit = digits, text[len(digits):].strip()
        try:
            number = float(number)
        except ValueError:
            number = math.nan
    if unit not in _UNITS or not math.isfinite(number) or number * _UNITS[unit] < 1 << 20:
        raise GraphfixError(f"--max-memory {value}: expected a size of at least 1M, such as 4G or 512M")
    return int(number * _UNITS[unit])


def memory_text(n: int) -> str:
    """Bytes as people read them (``1.5 GiB``, ``64.0 MiB``): what a budget message says."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------ the API's argument types
def _path(v: Any) -> bool:
    return isinstance(v, str | os.PathLike)


def _real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)


def _listed(v: Any) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, str | bytes)


def _names(v: Any) -> bool:
    return isinstance(v, str) or (_listed(v) and all(isinstance(n, str) for n in v))


def _shapes(v: Any) -> bool:
    """One shape set: input name -> dims (the dims' values are check_dims' business)."""
    return isinstance(v, dict) and all(
        isinstance(k, str) and (_listed(d) or (isinstance(d, np.ndarray) and d.ndim == 1)) for k, d in v.items())


def _optional(accepts: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or accepts(v)


#: The lowest --convert-opset target: every TensorRT parser from 7.0 on warns below it (ModelImporter.cpp).
LOWEST_CONVERT_OPSET = 7


_PATH = "a path (str or os.PathLike)"
#: What each argument of ``graphfix.fix`` (and of ``FixResult.save``/``save_report``) takes: the
#: test of its type and the words a refusal and docs/cli.md use (the Pass class of a ``passes`` list
#: lives a layer above: check_arguments is given it).
ARGUMENTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (lambda v: _path(v) or isinstance(v, onnx.ModelProto), f"{_PATH} or an onnx.ModelProto"),
    "passes": (lambda v: isinstance(v, str) or _listed(v), "'all', 'auto', a comma-separated string of pass names, or a list of pass names and Pass objects"),
    "skip": (_names, "a pass name, a comma-separated string of them, or a list of pass names"),
    "force": (_names, "a pass name, a comma-separated string of them, or a list of pass names"),
    "trt": (_optional(lambda v: isinstance(v, str)), "None or a TensorRT release as a string, such as '8.6' or '10.1' "
                                                     "(a float cannot say 10.10)"),
    "verify": (lambda v: isinstance(v, bool), "True or False"),
    "verify_each": (lambda v: isinstance(v, bool), "True or False"),
    "strict": (lambda v: isinstance(v, bool), "True or False"),
    "simplify": (lambda v: isinstance(v, bool), "True or False"),
    "atol": (_optional(_real), "None (automatic) or a finite number >= 0"),
    "rtol": (_optional(_real), "None (automatic) or a finite number >= 0"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool), f"a whole number in 0..{2**32 - 1}"),
    "iterations": (lambda v: isinstance(v, int) and not isinstance(v, bool), f"a whole number in 1..{MAX_ITERATIONS}"),
    "input_shapes": (_optional(lambda v: _shapes(v) or (_listed(v) and all(_shapes(s) for s in v))),
                     "None, a dict of input name to dims ({'x': (1, 3, 224, 224)}), or a list of such dicts"),
    "profile_shapes": (lambda v: _listed(v) and all(_shapes(s) for s in v),
                       "a list of dicts of input name to dims (min, opt, max)"),
    "fix_shapes": (_optional(_shapes), "None or a dict of input name to dims ({'x': (1, 3, 320, 320)})"),
    "val_range": (_optional(lambda v: isinstance(v, Mapping) and all(
        isinstance(k, str) and _listed(r) and len(r) == 2 and all(_real(x) for x in r) for k, r in v.items())),
                  "None or a dict of input name to (lo, hi) numbers"),
    "inputs": (_optional(lambda v: _path(v) or (isinstance(v, list | tuple) and all(isinstance(f, Mapping) for f in v))),
               f"None (random inputs), a list of dicts of input name to numpy array (one per iteration), or {_PATH} "
               "of an .npz or polygraphy JSON file"),
    "output": (_optional(_path), f"None or {_PATH}"),
    "progress": (_optional(callable), "None or a function taking one str"),
    "max_memory": (lambda v: isinstance(v, str) or _real(v), "a number of bytes or a size string with K/M/G/T "
                                                              "(binary), such as '4G' or '512M'; at least 1M"),
    "timeout": (_optional(_real), "None (300 s) or a number of seconds above 0 and at most 86400"),
    "convert_opset": (_optional(lambda v: isinstance(v, int) and not isinstance(v, bool)),
                      f"None or a default-domain opset number from {LOWEST_CONVERT_OPSET} to the installed onnx's newest, such as 13"),
    "requantize_symmetric": (lambda v: isinstance(v, bool), "True or False"),
    "dequantize_dynamic": (lambda v: isinstance(v, bool), "True or False"),
    "set_inputs": (_optional(lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v)),
                   "None or a dict of input name to a value (a number, a bool, a list or a numpy array)"),
    "path": (_path, _PATH),
    "external_data": (_optional(_path), f"None or {_PATH} (a file name beside the model)"),
}

_BRIEF = reprlib.Repr()
_BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlist, _BRIEF.maxdict, _BRIEF.maxtuple = 40, 40, 4, 4, 4


def _brief_instance(obj: Any, level: int) -> str:  # noqa: ARG001 - reprlib's signature
    """Numbers as written; any other object (bytes, a GraphProto, an array) by its type alone."""
    return repr(obj)[:40] if isinstance(obj, float | complex | bool | type(None)) else f"<{type(obj).__name__}>"


_BRIEF.repr_instance = _brief_instance


def check_arguments(given: Mapping[str, Any], pass_type: type = object, call: str | None = None) -> None:
    """The type of every argument given (names as in ARGUMENTS), refused in one line that names it
    (as ``call(name=...)`` when ``call`` is given) and says what it takes; the value checks
    (check_settings, check_dims) come after."""
    for name, value in given.items():
        if name not in ARGUMENTS:  # a keyword added without its entry: tests/settings/test_argument_types.py says so
            continue
        accepts, what = ARGUMENTS[name]
        ok = accepts(value)
        if ok and name == "passes" and not isinstance(value, str):
            ok = all(isinstance(p, str | pass_type) for p in value)
        if not ok:
            shown = f"{name}={_BRIEF.repr(value)}"
            raise GraphfixError(f"{f'{call}({shown})' if call else shown}: expected {what}")


def check_settings(*, passes: Any = "all", iterations: int = 1, seed: int = 1, atol: float | None = None,
                   rtol: float | None = None,
                   val_range: Mapping[str, tuple[float, float]] | None = None, max_memory: str | int | None = None) -> None:
    """Numbers and lists that make no sense, refused before anything is read."""
    if max_memory is not None:
        parse_memory(max_memory)
    for name, (lo, hi) in (val_range or {}).items():
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise GraphfixError(f"--val-range {name}:[{lo},{hi}]: needs finite bounds with lo <= hi")
    if isinstance(passes, str):
        if not [n for n in passes.split(",") if n.strip()]:
            raise GraphfixError(f"--passes {passes!r} names no pass: use 'all', 'auto' or a comma-separated list (graphfix passes lists them)")
    elif not list(passes):
        raise GraphfixError("--passes is an empty list: use 'all', 'auto' or name the passes")
    if not isinstance(iterations, int) or isinstance(iterations, bool) or not 1 <= iterations <= MAX_ITERATIONS:
        raise GraphfixError(f"--iterations {_shown(iterations)}: must be a whole number in 1..{MAX_ITERATIONS}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise GraphfixError(f"--seed {_shown(seed)}: must be a whole number in 0..{2**32 - 1}")
    for name, value in (("--atol", atol), ("--rtol", rtol)):
        if value is None:  # automatic: graphfix.verify.sessions.DEFAULT_TOLERANCE and the model's noise floor
            continue
        try:
            ok = math.isfinite(value) and value >= 0
        except TypeError:
            ok = False
        if not ok:
            raise GraphfixError(f"{name} {value}: must be a finite number >= 0 (NaN or inf would switch verification off)")


def check_convert_opset(target: int | None) -> None:
    """A target opset ONNX's converter can write (None: no conversion)."""
    if target is None:
        return
    newest = onnx.defs.onnx_opset_version()
    if not isinstance(target, int) or isinstance(target, bool) or not LOWEST_CONVERT_OPSET <= target <= newest:
        raise GraphfixError(f"--convert-opset {_shown(target)}: must be a whole number in {LOWEST_CONVERT_OPSET}..{newest} "
                            f"(the opsets onnx {onnx.__version__} converts to)")


def check_dims(option: str, shape_sets: Sequence[Mapping[str, Sequence[int]]]) -> None:
    """Every dim of every shape given in ``option`` is a whole number in 0..MAX_DIM."""
    for shapes in shape_sets:
        for name, dims in shapes.items():
            for d in dims:
                if not isinstance(d, int | np.integer) or isinstance(d, bool) or not 0 <= d <= MAX_DIM:
                    raise GraphfixError(f"{option} {name}: dim {_shown(d)} is out of range; a dim is a whole number in 0..{MAX_DIM} "
                                        "(TensorRT's dims are int32)")


def _shown(value: object) -> str:
    """A number as typed, its first digits and length when it is long (a 400-digit dim)."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} digits)"


def check_jobs(jobs: int) -> None:
    """``check --jobs N``: each job is a process holding a model; a huge N is refused, not tried."""
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= MAX_JOBS:
        raise GraphfixError(f"--jobs {_shown(jobs)}: must be a whole number in 1..{MAX_JOBS}")


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _kind(tp: onnx.TypeProto) -> str:
    which = tp.WhichOneof("value")
    return {"sequence_type": "a sequence", "optional_type": "an optional", "map_type": "a map",
            "sparse_tensor_type": "a sparse tensor", None: "untyped"}.get(which, str(which))


def _type_name(elem_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"type {elem_type}"


def check_verifiable(model: onnx.ModelProto, where: str | None = None) -> None:
    """Verification feeds random tensors and compares tensor outputs: say which input or output
    it cannot handle, instead of an onnxruntime/polygraphy error about something else."""
    for vi in _graph_inputs(model):
        if vi.type.WhichOneof("value") != "tensor_type":
            raise GraphfixError(f"input '{vi.name}' is {_kind(vi.type)}; verification feeds tensors only: use --no-verify", where)
        et = vi.type.tensor_type.elem_type
        if et not in FEEDABLE:
            raise GraphfixError(f"input '{vi.name}' has type {_type_name(et)}, which verification cannot generate or compare: use --no-verify", where)
    for vi in model.graph.output:
        if vi.type.WhichOneof("value") not in ("tensor_type", None):
            raise GraphfixError(f"output '{vi.name}' is {_kind(vi.type)}; verification compares tensor outputs only: use --no-verify", where)
        if vi.type.tensor_type.elem_type in UNRETURNABLE:
            raise GraphfixError(f"output '{vi.name}' has type {_type_name(vi.type.tensor_type.elem_type)}, which onnxruntime cannot return to Python: use --no-verify", where)


def check_feed_budget(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], iterations: int, where: str | None = None) -> None:
    """Random inputs must fit in memory: at most MAX_FEED_BYTES over all iterations."""
    total = 0
    named = dict(shapes)
    for vi in _graph_inputs(model):
        tt = vi.type.tensor_type
        dims = named.get(vi.name)
        if dims is None:
            dims = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
            if 0 in dims:  # empty random inputs verify nothing (and crash some onnxruntime kernels)
                raise GraphfixError(f"input '{vi.name}' declares a dimension of 0, so random inputs would be empty: "
                                    "give its shape with --input-shapes, or use --no-verify", where)
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 8
        size = itemsize * math.prod(max(int(d), 0) for d in dims)
        total += size
        if size * iterations > MAX_FEED_BYTES or total * iterations > MAX_FEED_BYTES:
            shape = "x".join(map(str, dims))
            raise GraphfixError(
                f"input '{vi.name}' ({shape}) makes {_bytes(total * iterations)} of random inputs over {iterations} iteration(s); "
                "graphfix generates at most 2 GiB: set smaller --input-shapes or --iterations", where)


def _bytes(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_feeds(model: onnx.ModelProto, feeds: Any, where: str | None = None) -> None:
    """Loaded inputs: at least one set, numpy arrays of the model's input dtypes and static dims."""
    if not isinstance(feeds, list | tuple) or not feeds:
        raise GraphfixError("contains no input sets (an empty list); give at least one, or leave --load-inputs out for random inputs", where)
    expected = {vi.name: vi for vi in _graph_inputs(model)}
    total = 0
    for k, feed in enumerate(feeds):
        if not isinstance(feed, Mapping):
            raise GraphfixError(f"input set {k} is {type(feed).__name__}, not a mapping of input names to arrays", where)
        if set(feed) != set(expected):
            raise GraphfixError(f"inputs name {sorted(feed)}, the model needs {sorted(expected)}", where)
        for name, value in feed.items():
            total += _check_array(name, value, expected[name], where)
    if total > MAX_FEED_BYTES:
        raise GraphfixError(f"inputs hold {_bytes(total)}; graphfix loads at most 2 GiB", where)


def _check_array(name: str, value: Any, vi: onnx.ValueInfoProto, where: str | None) -> int:
    if not isinstance(value, np.ndarray):
        raise GraphfixError(f"input '{name}' is {type(value).__name__}, not a numpy array", where)
    tt = vi.type.tensor_type
    try:
        want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except (KeyError, TypeError, ValueError):
        want = None
    if want is not None and value.dtype != want:
        raise GraphfixError(f"input '{name}' is {value.dtype}, the model's input is {want}: convert it (graphfix does not cast inputs)", where)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
    if dims is not None and (len(dims) != value.ndim or any(d is not None and d != s for d, s in zip(dims, value.shape, strict=False))):
        want_shape = "x".join("?" if d is None else str(d) for d in dims)
        raise GraphfixError(f"input '{name}' has shape {'x'.join(map(str, value.shape)) or 'scalar'}, the model's input is {want_shape}", where)
    return int(value.nbytes)
