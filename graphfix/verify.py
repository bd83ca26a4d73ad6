"""onnxruntime verification: inputs made once, one session per graph state, polygraphy comparison.

Inputs come from polygraphy's DataLoader (seeded, dtype-aware); sessions run in graphfix's
onnxruntime worker process (graphfix.runtime_worker: a crash or an endless run there ends the
run in one line instead of taking graphfix down) and their outputs are polygraphy RunResults
that ``polygraphy run --load-outputs`` reads; comparisons use polygraphy's SimpleCompareFunc
(abs/rel tolerance per output).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from polygraphy.common import TensorMetadata
from polygraphy.comparator import DataLoader, RunResults
from polygraphy.comparator.compare import SimpleCompareFunc
from polygraphy.comparator.struct import IterationResult
from polygraphy.logger import G_LOGGER

from graphfix import report as report_mod
from graphfix import runtime_worker
from graphfix.atomic import reraise_swallowed_signal
from graphfix.errors import GraphfixError
from graphfix.model_io import Assembled, first_line, runtime_compatible
from graphfix.options import MAX_DIM

Feeds = list[dict[str, np.ndarray]]
#: Default value range of float inputs.
FLOAT_RANGE = (-1.0, 1.0)


@contextlib.contextmanager
def quiet_polygraphy() -> Iterator[None]:
    """Polygraphy logs every run and comparison at INFO; graphfix prints its own table."""
    with G_LOGGER.verbosity(G_LOGGER.CRITICAL):
        yield


# ------------------------------------------------------------------ user options
_SHAPE = re.compile(r"^(?P<name>.+):(?P<dims>\d+(?:x\d+)*|\[\s*\d*(?:\s*,\s*\d+)*\s*\])$")
_RANGE = re.compile(r"^(?P<name>.+):\[\s*(?P<lo>[-+0-9.eE]+)\s*,\s*(?P<hi>[-+0-9.eE]+)\s*\]$")


def parse_input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """trtexec style: ``name:1x3x224x224`` (``name:[1,3,224,224]`` also accepted); several
    separated by commas or given as several arguments."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in _split_items(items):
        m = _SHAPE.match(item)
        if not m:
            raise GraphfixError(f"bad --input-shapes entry {item!r}: expected name:1x3x224x224")
        dims = m.group("dims").strip("[]")
        sep = "x" if "x" in dims or "," not in dims else ","
        parts = [d.strip() for d in dims.split(sep) if d.strip()]
        big = next((d for d in parts if len(d.lstrip("0")) > len(str(MAX_DIM)) or int(d) > MAX_DIM), None)
        if big is not None:  # checked as text first: int() of 5000 digits is itself an error
            shown = big if len(big) <= 24 else f"{big[:12]}…({len(big)} digits)"
            raise GraphfixError(f"shape entry {m.group('name')!r}: dim {shown} is out of range; a dim is at most {MAX_DIM} "
                                "(TensorRT's dims are int32)")
        shapes[m.group("name")] = tuple(int(d) for d in parts)
    return shapes


def parse_shape_sets(items: list[str] | None) -> list[dict[str, tuple[int, ...]]]:
    """Repeated ``--input-shapes``: an occurrence that names an input again starts another shape set
    (each set is verified); occurrences naming different inputs add to the same set."""
    sets: list[dict[str, tuple[int, ...]]] = []
    for item in items or []:
        shapes = parse_input_shapes([item])
        if not sets or set(shapes) & set(sets[-1]):
            sets.append({})
        sets[-1].update(shapes)
    return sets


def parse_val_ranges(items: list[str] | None) -> dict[str, tuple[float, float]]:
    """polygraphy style: ``name:[lo,hi]``."""
    ranges: dict[str, tuple[float, float]] = {}
    for item in items or []:
        m = _RANGE.match(item.strip())
        if not m:
            raise GraphfixError(f"bad --val-range entry {item!r}: expected name:[lo,hi]")
        lo, hi = float(m.group("lo")), float(m.group("hi"))
        if lo > hi:
            raise GraphfixError(f"bad --val-range entry {item!r}: lo > hi")
        ranges[m.group("name")] = (lo, hi)
    return ranges


def _split_items(items: list[str] | None) -> list[str]:
    out: list[str] = []
    for item in items or []:
        # "a:1x3,b:2x2" but not "a:[1,3]"
        out.extend(p.strip() for p in re.split(r",(?![^\[]*\])", item) if p.strip())
    return out


# ------------------------------------------------------------------ inputs
def input_metadata(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]] | None = None) -> TensorMetadata:
    """Graph inputs (not initializers) with dynamic dims taken from ``shapes`` or set to 1."""
    shapes = dict(shapes or {})
    inits = {i.name for i in model.graph.initializer}
    meta = TensorMetadata()
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if vi.name in shapes:
            given = shapes.pop(vi.name)
            if len(given) != len(dims) or any(d is not None and d != g for d, g in zip(dims, given, strict=False)):
                raise GraphfixError(f"--input-shapes {vi.name}:{'x'.join(map(str, given))} does not fit the input's shape {_dims_str(dims)}")
            dims = list(given)
        meta.add(vi.name, dtype, tuple(1 if d is None else d for d in dims))
    if shapes:
        raise GraphfixError(f"--input-shapes names unknown inputs: {', '.join(shapes)} (inputs: {', '.join(meta.keys())})")
    return meta


def check_val_range(meta: TensorMetadata, val_range: dict[str, tuple[float, float]] | None) -> None:
    unknown = set(val_range or {}) - set(meta.keys())
    if unknown:
        raise GraphfixError(f"--val-range names unknown inputs: {', '.join(sorted(unknown))}")


def _dims_str(dims: list[int | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


def make_inputs(
    model: onnx.ModelProto,
    shapes: dict[str, tuple[int, ...]] | None = None,
    val_range: dict[str, tuple[float, float]] | None = None,
    seed: int = 1,
    iterations: int = 1,
) -> Feeds:
    """Deterministic random feeds, one dict per iteration (polygraphy DataLoader).

    Floats default to [-1, 1] rather than polygraphy's [0, 1]: negative values are what expose a
    wrong rewrite of sign-sensitive ops (Clip, Max/Min, Relu, Abs). Integers keep [0, 1].
    """
    meta = input_metadata(model, shapes)
    check_val_range(meta, val_range)
    floats = {vi.name for vi in model.graph.input if onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).kind == "f"}
    ranges = {name: FLOAT_RANGE for name in meta if name in floats}
    ranges.update(val_range or {})
    with quiet_polygraphy():
        loader = DataLoader(seed=seed, iterations=iterations, input_metadata=meta, val_range=ranges or None)
        return [dict(feed) for feed in loader]


def load_inputs(path: str, model: onnx.ModelProto) -> Feeds:
    """``.npz`` (one iteration) or polygraphy's JSON (``polygraphy run --save-inputs``)."""
    p = Path(path)
    if not p.exists():
        raise GraphfixError("no such file", path)
    try:
        if p.suffix == ".npz":
            with np.load(p) as data:
                feeds = [{k: data[k] for k in data.files}]
        else:
            from polygraphy.json import load_json

            feeds = [dict(f) for f in load_json(str(p))]
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise GraphfixError(f"cannot read inputs ({first_line(exc)})", path) from exc
    expected = set(input_metadata(model).keys())
    for feed in feeds:
        if set(feed) != expected:
            raise GraphfixError(f"inputs name {sorted(feed)}, the model needs {sorted(expected)}", path)
    return feeds


# ------------------------------------------------------------------ running
class CannotRun(Exception):
    """onnxruntime cannot run a model graphfix must run (the caller says which and why)."""


class SessionCounter:
    """Counts onnxruntime sessions (reports say what verification cost) and remembers whether
    verification's tuned session settings had to give way to onnxruntime's defaults."""

    def __init__(self) -> None:
        self.count = 0
        self.tuned = True
        #: (model, feeds, results): the original's run under the other settings (:func:`switched_run`)
        self.switched: tuple[object, Feeds, RunResults] | None = None


#: Said in the report when verification had to use onnxruntime's default session settings.
DEFAULT_SETTINGS_NOTE = ("onnxruntime could not run the model with verification's session settings (no graph "
                         "optimizations, no memory pattern) but runs it with its defaults: every session used the defaults")


def session(model: onnx.ModelProto, base_dir=None, tuned: bool = True):
    """A bare onnxruntime CPU session (the candidate-shape search), in graphfix's worker process."""
    if any(n.op_type == "ATen" for n in model.graph.node):  # onnxruntime has no ATen kernels
        from graphfix.aten_reference import evaluator

        return evaluator(model)
    from graphfix import external

    with runtime_worker.describing("the input model"):
        return external.session(runtime_compatible(model), base_dir, tuned)


def run(model: onnx.ModelProto | Assembled, feeds: Feeds, name: str, counter: SessionCounter | None = None,
        base_dir=None) -> RunResults:
    """One onnxruntime session for ``model`` (a ModelProto, or an Assembled one whose weights are
    another model's protos), run on every feed (``base_dir``: where its external data lives;
    onnxruntime reads it from there)."""
    parts = Assembled.of(model)
    if not on_onnxruntime(parts):
        from graphfix.aten_reference import run_results  # the ONNX reference evaluator

        return run_results(parts.proto(), feeds, name)
    parts = parts.compatible()
    tuned = counter.tuned if counter is not None else True
    try:
        return _compare_run(parts, feeds, name, counter, base_dir, tuned)
    except GraphfixError:
        raise
    except Exception:  # noqa: BLE001 - the tuned settings may be what fails (below)
        if not tuned:
            raise
    # A model a default session runs must never be refused: the tuned settings pre-allocate
    # outputs from declared shapes (a legacy scatter_reduce If declaring [24] while computing [3,8]).
    results = _compare_run(parts, feeds, name, counter, base_dir, tuned=False)
    if counter is not None:
        counter.tuned = False
    return results


def _compare_run(parts: Assembled, feeds: Feeds, name: str, counter: SessionCounter | None, base_dir, tuned: bool) -> RunResults:
    """One session (in graphfix's onnxruntime worker, graphfix.runtime_worker), run on every feed,
    as polygraphy's RunResults (what ``polygraphy run --load-outputs`` reads)."""
    from graphfix import external

    if counter is not None:
        counter.count += 1
    with runtime_worker.describing(_LABELS.get(name, f"the model {name!r}")):
        made = external.session(parts, base_dir, tuned)
    try:
        its = []
        with quiet_polygraphy():
            for feed in feeds:
                outputs = made.run_named(feed)
                its.append(IterationResult(outputs, runtime=made.last_runtime, runner_name=name))
    finally:
        made.close()
    reraise_swallowed_signal()
    return RunResults([(name, its)])


#: What a session runs, as a failure names it.
_LABELS = {"original": "the input model", "graphfix-probe": "the verification probe (the input model with every "
           "rewritten region beside it)", "graphfix-fixed": "the fixed model", "graphfix-noise": "the input model (noise floor)"}


def _wrong_in_onnxruntime(model: onnx.ModelProto, initializers: list[onnx.TensorProto] | None = None) -> bool:
    """A node the installed onnxruntime computes wrongly, so it cannot be the reference: Col2Im
    that is not 2-D with a dilation > 1 (onnxruntime 1.32 misplaces the blocks; the ONNX
    reference evaluator follows the spec), STFT/DFT of a length that is not a power of two, an
    opset-26+ op it does not implement. ``initializers``: the model's, where ``model`` is a stub without them."""
    weights: dict[str, onnx.TensorProto] | None = None
    for n in model.graph.node:
        if n.op_type == "Col2Im" and not _onnxruntime_col2im_dilation_ok():
            dilations = next((list(a.ints) for a in n.attribute if a.name == "dilations"), [])
            if len(dilations) != 2 and any(d > 1 for d in dilations):
                return True
        if n.op_type in ("STFT", "DFT") and not _onnxruntime_dft_length_ok():
            if weights is None:
                weights = {t.name: t for t in (model.graph.initializer if initializers is None else initializers)}
            if not _power_of_two_length(n, weights, model):
                return True
        if n.op_type in _NEWEST and n.domain in ("", "ai.onnx") and _onnxruntime_lacks(n.op_type):
            return True
    return False


#: Ops of opset >= 26 (onnx 1.23): the installed onnxruntime may not implement them yet (1.32 has no
#: SwiGLU); a model with one is then run on the ONNX reference evaluator, which follows the spec.
_NEWEST = frozenset({"BitCast", "CumProd", "LinearAttention", "CausalConvWithState", "SwiGLU"})


@functools.cache
def _onnxruntime_lacks(op: str) -> bool:
    """Asked of the installed onnxruntime once: a one-node float model of ``op`` at its opset is
    refused as NOT_IMPLEMENTED."""
    import onnxruntime as ort
    from onnx import TensorProto, defs, helper

    schema = defs.get_schema(op)
    names = [f"i{k}" for k, f in enumerate(schema.inputs) if f.option != defs.OpSchema.FormalParameterOption.Optional]
    node = helper.make_node(op, names, ["y"])
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2]) for i in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", schema.since_version)])
    try:
        ort.InferenceSession(runtime_compatible(m).SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - only "not implemented" means the op is missing
        return "NOT_IMPLEMENTED" in str(exc)
    return False


def _power_of_two_length(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto], model: onnx.ModelProto) -> bool:
    """The node's transform length is known and a power of two (onnxruntime then runs its radix-2
    FFT, exact to float rounding): STFT's frame_length or window as an initializer, DFT's
    dft_length, else (not an irfft) the static length of its axis."""
    def weight(k: int) -> np.ndarray | None:
        init = weights.get(node.input[k]) if len(node.input) > k and node.input[k] else None
        return None if init is None else onnx.numpy_helper.to_array(init).reshape(-1)

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "STFT":
        length, window = weight(3), weight(2)
        n = int(length[0]) if length is not None else window.size if window is not None else 0
    elif weight(1) is not None:
        n = int(weight(1)[0])
    elif attrs.get("inverse") and attrs.get("onesided"):
        n = 0  # the length is 2 * (bins - 1): left to the reference
    else:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        axis = weight(2) if opset >= 20 else None
        axis = int(axis[0]) if axis is not None else (-2 if opset >= 20 else int(attrs.get("axis", 1)))
        n = _static_dim(model, node.input[0], axis)
    return n > 0 and n & (n - 1) == 0


def _static_dim(model: onnx.ModelProto, name: str, axis: int) -> int:
    """Dim ``axis`` of tensor ``name`` as declared in the model (0 when unknown)."""
    for vi in (*model.graph.input, *model.graph.value_info):
        if vi.name == name and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if -len(dims) <= axis < len(dims) and dims[axis].HasField("dim_value"):
                return int(dims[axis].dim_value)
    return 0


@functools.cache
def _onnxruntime_dft_length_ok() -> bool:
    """Asked of the installed onnxruntime: is its DFT of a length that is not a power of two (400,
    Whisper's n_fft) within REGION_ULPS of a float64 FFT? onnxruntime 1.32's is not (about N^2 ulps
    lost: 4e-3 on bins near 40), so STFT/DFT rewrites, exact to float rounding, would be rolled back."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    n = 400
    graph = helper.make_graph([helper.make_node("DFT", ["x"], ["y"], axis=1)], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(0).standard_normal((1, n, 1)).astype(np.float32)
    try:
        got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001 - cannot run it: do not trust it
        return False
    ref = np.fft.fft(x[0, :, 0].astype(np.float64))
    ref = np.stack([ref.real, ref.imag], -1)[None].astype(np.float32)
    return bool(np.abs(got - ref).max() <= max(DEFAULT_TOLERANCE, rounding_floor(ref)))


@functools.cache
def _onnxruntime_col2im_dilation_ok() -> bool:
    """Asked of the installed onnxruntime (in the worker): a 2-channel 1-D Col2Im with dilation 2
    against the reference."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], dilations=[2], strides=[1], pads=[0, 0])
    graph = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([9], np.int64), "image"),
                               numpy_helper.from_array(np.array([3], np.int64), "block")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = np.arange(30, dtype=np.float32).reshape(1, 6, 5)  # two channels: one alone comes out right
    try:
        from graphfix import external

        with runtime_worker.describing("a Col2Im probe"):
            got = external.session(m, None, tuned=False).run(None, {"x": x})[0]
    except Exception:  # noqa: BLE001 - cannot run it: do not trust it
        return False
    return bool(np.allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0]))


def unusable(first: list, second: list, names: list[str]) -> str | None:
    """Why outputs at a candidate shape cannot judge a rewrite, if they cannot: the original model
    gives different values on two identical runs (onnxruntime itself is nondeterministic there:
    Swin at 4x4 gave 2.08, NaN or 0.0), or its float outputs are degenerate (one all NaN/inf,
    or every one constant)."""
    arrays = [(name, np.asarray(a), np.asarray(b)) for name, a, b in zip(names, first, second, strict=False)]
    for name, a, b in arrays:
        if a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            return f"onnxruntime's outputs for the original model differ between two identical runs ({name})"
    floats = [(name, a) for name, a, _ in arrays if a.dtype.kind == "f" and a.size]
    for name, a in floats:
        if not np.isfinite(a).any():
            return f"output {name} is all NaN/inf there"
    if floats and all(a.size > 1 and bool(np.all(a == a.flat[0])) for _, a in floats):
        return "every float output is constant there"
    return None


#: The configuration users run: what polygraphy's onnxrt runner and a plain InferenceSession use.
USERS_SETTINGS = "onnxruntime's default session settings (graph optimizations on)"


def on_onnxruntime(model: onnx.ModelProto | Assembled) -> bool:
    """Whether verification runs ``model`` on onnxruntime (not on the ONNX reference evaluator:
    ATen nodes, ops the installed onnxruntime computes wrongly)."""
    parts = Assembled.of(model)
    return not (any(n.op_type == "ATen" for n in parts.stub.graph.node) or _wrong_in_onnxruntime(parts.stub, parts.initializers))


def users_run(model: onnx.ModelProto | Assembled, feeds: Feeds, name: str, counter: SessionCounter,
              base_dir=None) -> RunResults:
    """One session of ``model`` under :data:`USERS_SETTINGS` (graph optimizations on: onnxruntime's
    fusions, e.g. DivMulFusion, apply), run on every feed."""
    return _compare_run(Assembled.of(model).compatible(), feeds, name, counter, base_dir, tuned=False)


def nudged_feeds(feeds: Feeds) -> Feeds:
    """Every float input moved by one ulp (how much the model amplifies rounding: :func:`noise_floor`)."""
    return [{k: _nudged(v) for k, v in feed.items()} for feed in feeds]


def switched_run(model: onnx.ModelProto, feeds: Feeds, counter: SessionCounter, base_dir=None) -> RunResults:
    """``model`` under the session settings verification's sessions do not use (onnxruntime's
    defaults, unless the model needed them everywhere), on ``feeds`` then :func:`nudged_feeds`.
    One session per (model, feeds): the noise floor and the reference under the users' settings
    (:func:`users_run`) share it."""
    cached = counter.switched
    if cached is not None and cached[0] is model and cached[1] is feeds:
        return cached[2]
    results = _compare_run(Assembled.of(model).compatible(), [*feeds, *nudged_feeds(feeds)], "graphfix-original", counter,
                           base_dir, not counter.tuned)
    counter.switched = (model, feeds, results)
    return results


def first_iterations(results: RunResults, n: int) -> RunResults:
    """The same run restricted to its first ``n`` iterations (a :func:`switched_run` on the feeds alone)."""
    out = RunResults()
    for runner, its in results:
        out.append((runner, list(its[:n])))
    return out


def noise_floor(model: onnx.ModelProto, feeds: Feeds, baseline: RunResults, counter: SessionCounter,
                base_dir=None, ran: RunResults | None = None) -> dict[str, float]:
    """How far the original model's float outputs move under changes that are correct by
    construction: onnxruntime's graph optimizations switched (its fusions round differently), and
    every float input moved by one ulp (how much the model amplifies rounding). Max abs per output;
    one more session, made only when the strict end-to-end comparison failed (``ran``: that run,
    already made on ``feeds`` then :func:`nudged_feeds`, e.g. the run under the users' settings).
    Where the reference evaluator is the reference (an op onnxruntime computes wrongly), only the
    nudge applies: an STFT output of 1000-sample frames moves by ~1.5e-5 when its inputs move by one ulp."""
    parts = Assembled.of(model)
    if any(n.op_type == "ATen" for n in parts.stub.graph.node):
        return {}
    try:
        if not on_onnxruntime(parts):
            from graphfix.aten_reference import run_results  # the ONNX reference evaluator

            results = run_results(parts.proto(), [*feeds, *nudged_feeds(feeds)], "graphfix-noise")
        else:
            results = ran or switched_run(model, feeds, counter, base_dir)
    except GraphfixError:
        raise
    except Exception:  # noqa: BLE001 - no noise floor: the strict comparison stands
        return {}
    runs, n, floor = iterations(results), len(feeds), {}
    for k, base in enumerate(iterations(baseline)):
        for name in base:
            ref = np.asarray(base[name])
            if ref.dtype.kind == "f" and name in runs[k]:
                moved = max(_finite_max_abs(ref, np.asarray(runs[k][name])), _finite_max_abs(ref, np.asarray(runs[n + k][name])))
                floor[name] = max(floor.get(name, 0.0), moved)
    return floor


def _nudged(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    return np.nextafter(value, np.inf).astype(value.dtype) if value.dtype.kind == "f" else value


def _finite_max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return 0.0
    both = np.isfinite(a) & np.isfinite(b)
    return float(np.abs(a[both].astype(np.float64) - b[both]).max()) if both.any() else 0.0


def select_outputs(results: RunResults, names: list[str]) -> RunResults:
    """The same run restricted to ``names`` (the probe's original outputs are the baseline)."""
    out = RunResults()
    for runner, its in results:
        out.append((runner, [IterationResult({k: it[k] for k in names if k in it}, runtime=it.runtime, runner_name=it.runner_name) for it in its]))
    return out


def region_diffs(results: RunResults, probes: dict[str, str], atol: float, rtol: float,
                 rounding: bool = False) -> dict[str, OutputDiff]:
    """Per original tensor a region recomputes: original vs rewritten value, over every feed.

    Same rule as polygraphy's SimpleCompareFunc (an element passes when its absolute difference
    is <= atol or its relative difference is <= rtol; NaN where the original has NaN agrees), in
    plain numpy: polygraphy formats every array it compares, which dominates on many regions.
    ``rounding`` (automatic tolerance): atol is at least :data:`REGION_ULPS` units in the last place
    of the tensor's largest magnitude, what a few ops computing the same value in another order
    round to (a bilinear GridSample of correlation volumes near 40 differs by 1.5e-5 exactly so).
    """
    diffs: dict[str, OutputDiff] = {}
    for it in iterations(results):
        for name, probe in probes.items():
            ref = np.asarray(it[name])
            cur = _numpy_diff(ref, np.asarray(it[probe]), max(atol, rounding_floor(ref)) if rounding else atol, rtol)
            prev = diffs.get(name)
            diffs[name] = cur if prev is None else OutputDiff(
                max(prev.max_abs, cur.max_abs), max(prev.max_rel, cur.max_rel), prev.passed and cur.passed, prev.note or cur.note)
    return diffs


#: atol and rtol unless given (--atol/--rtol, which are then used exactly).
DEFAULT_TOLERANCE = 1e-5
#: A region's own rounding: this many units in the last place of its tensor's largest magnitude.
REGION_ULPS = 16
#: End to end, a fixed model is accepted within this many times the original model's noise floor
#: (:func:`noise_floor`): a rewrite rounds a few ops differently, and a deep model amplifies that
#: the way it amplifies its own rounding.
NOISE_MULTIPLE = report_mod.NOISE_MULTIPLE


def rounding_floor(ref: np.ndarray) -> float:
    """:data:`REGION_ULPS` ulps of the largest finite magnitude of a float tensor (0 for others)."""
    if ref.dtype.kind != "f" or ref.size == 0:
        return 0.0
    finite = np.abs(ref[np.isfinite(ref)])
    return float(REGION_ULPS * np.finfo(ref.dtype).eps * finite.max()) if finite.size else 0.0


#: Tolerance floors for low-precision outputs: 4 units in the last place, since a rewrite that
#: computes the same value in more ops rounds at each of them. At the float32 defaults (1e-5) a
#: correct fp16 rewrite (epsilon 9.8e-4) would be rolled back.
_ULPS = 4


def tolerances(dtype: np.dtype, atol: float, rtol: float) -> tuple[float, float]:
    """(atol, rtol) for comparing outputs of ``dtype``: the given ones, raised to the floor of
    fp16/bf16 (float32 and wider keep exactly what was asked)."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        eps = float(np.finfo(np.float16).eps)
    elif dtype.name == "bfloat16":
        eps = 2.0**-7
    else:
        return atol, rtol
    floor = _ULPS * eps
    return max(atol, floor), max(rtol, floor)


def _numpy_diff(ref: np.ndarray, cand: np.ndarray, atol: float, rtol: float) -> OutputDiff:
    atol, rtol = tolerances(ref.dtype, atol, rtol)
    if ref.shape != cand.shape or ref.dtype != cand.dtype:
        return OutputDiff(float("inf"), float("inf"), False, f"{ref.dtype}{list(ref.shape)} became {cand.dtype}{list(cand.shape)}")
    ref, cand, nan_note = _align_nans(ref, cand)
    if nan_note:
        return OutputDiff(float("nan"), float("nan"), False, nan_note)
    if ref.size == 0:
        return OutputDiff(0.0, 0.0, True)
    if ref.dtype.kind in "biu":
        ref, cand = ref.astype(np.float64), cand.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        a, b = ref.astype(np.float64), cand.astype(np.float64)
        same = (a == b)  # equal infinities agree
        absdiff = np.where(same, 0.0, np.abs(a - b))
        reldiff = np.where(same, 0.0, absdiff / np.abs(a))
        ok = (absdiff <= atol) | (reldiff <= rtol)
    return OutputDiff(float(np.nanmax(absdiff)), float(np.nanmax(reldiff)), bool(ok.all()))


def iterations(results: RunResults) -> list[IterationResult]:
    return results[0][1]


@dataclass
class OutputDiff:
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""
    #: the original model's own noise floor for this output, when the comparison allowed for it
    noise_floor: float | None = None

    def as_dict(self) -> dict[str, object]:
        extra = {"note": self.note} if self.note else {}
        if self.noise_floor is not None:
            extra["noise_floor"] = self.noise_floor
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "passed": self.passed, **extra}


def compare(reference: RunResults, candidate: RunResults, atol: float, rtol: float,
            noise: dict[str, float] | None = None) -> dict[str, OutputDiff]:
    """Worst difference per output over all iterations (polygraphy SimpleCompareFunc; fp16/bf16
    outputs at no less than :func:`tolerances`' floor; with ``noise``, the original model's noise
    floor per output, atol is at least :data:`NOISE_MULTIPLE` times it)."""
    funcs: dict[tuple[float, float], SimpleCompareFunc] = {}
    diffs: dict[str, OutputDiff] = {}
    with quiet_polygraphy():
        for ref_it, cand_it in zip(iterations(reference), iterations(candidate), strict=True):
            for name in ref_it:
                if name not in cand_it:
                    diffs[name] = OutputDiff(float("inf"), float("inf"), False, "output missing")
                    continue
                ref, cand = np.asarray(ref_it[name]), np.asarray(cand_it[name])
                if ref.shape != cand.shape or ref.dtype != cand.dtype:
                    note = f"{ref.dtype}{list(ref.shape)} became {cand.dtype}{list(cand.shape)}"
                    diffs[name] = OutputDiff(float("inf"), float("inf"), False, note)
                    continue
                ref, cand, nan_note = _align_nans(ref, cand)
                if nan_note:
                    diffs[name] = OutputDiff(float("nan"), float("nan"), False, nan_note)
                    continue
                tol = tolerances(ref.dtype, atol, rtol)
                floor = (noise or {}).get(name)
                if floor:
                    tol = (max(tol[0], NOISE_MULTIPLE * floor), tol[1])
                if tol not in funcs:
                    funcs[tol] = SimpleCompareFunc(atol=tol[0], rtol=tol[1], check_shapes=True, infinities_compare_equal=True)
                with np.errstate(divide="ignore", invalid="ignore"):
                    result = funcs[tol](IterationResult({name: ref}), IterationResult({name: cand}))[name]
                max_abs, max_rel = float(result.max_absdiff), float(result.max_reldiff)
                if max_abs == 0:
                    max_rel = 0.0  # polygraphy's 0/0 for exact zeros
                prev = diffs.get(name)
                cur = OutputDiff(max_abs, max_rel, bool(result), noise_floor=floor)
                if prev is None:
                    diffs[name] = cur
                else:
                    diffs[name] = OutputDiff(max(prev.max_abs, cur.max_abs), max(prev.max_rel, cur.max_rel),
                                             prev.passed and cur.passed, prev.note, floor)
    return diffs


def sorted_diffs(reference: RunResults, candidate: RunResults, names: list[str], atol: float, rtol: float,
                 noise: dict[str, float] | None = None) -> dict[str, OutputDiff]:
    """Per output, its values compared as sorted (the same multiset), worst over the iterations:
    what a tie-sensitive output (TopK of 300 over 8400 anchors at near-ties) keeps when near-tied
    elements come out in another order. Tolerances as :func:`compare` (``noise``: the floor)."""
    diffs: dict[str, OutputDiff] = {}
    for ref_it, cand_it in zip(iterations(reference), iterations(candidate), strict=True):
        for name in names:
            ref, cand = np.asarray(ref_it[name]), np.asarray(cand_it[name])
            floor = (noise or {}).get(name) or 0.0
            cur = _numpy_diff(np.sort(ref, axis=None), np.sort(cand, axis=None), max(atol, NOISE_MULTIPLE * floor), rtol) \
                if ref.shape == cand.shape else OutputDiff(float("inf"), float("inf"), False, "shapes differ")
            prev = diffs.get(name)
            diffs[name] = cur if prev is None else OutputDiff(
                max(prev.max_abs, cur.max_abs), max(prev.max_rel, cur.max_rel), prev.passed and cur.passed, prev.note or cur.note)
    return diffs


def _align_nans(ref: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, str]:
    """NaN where the original has NaN is agreement (polygraphy alone would fail any NaN)."""
    if ref.dtype.kind not in "fc":
        return ref, cand, ""
    ref_nan, cand_nan = np.isnan(ref), np.isnan(cand)
    if not ref_nan.any() and not cand_nan.any():
        return ref, cand, ""
    if not np.array_equal(ref_nan, cand_nan):
        return ref, cand, f"NaN at {int((ref_nan != cand_nan).sum())} position(s) where the other model has a number"
    return np.where(ref_nan, 0, ref), np.where(cand_nan, 0, cand), ""
