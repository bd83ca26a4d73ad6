"""Comparing outputs by polygraphy's elementwise rule, in numpy and in chunks (polygraphy's own
comparator costs 4 ms an output and output-sized temporaries), with graphfix's tolerances (dtype
rounding, the original's noise floor, NaN alignment, ties); strings by equality.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from polygraphy.comparator import RunResults
from polygraphy.comparator.struct import IterationResult

from graphfix.verify import precision as precision_mod


def first_iterations(results: RunResults, n: int) -> RunResults:
    """The same run restricted to its first ``n`` iterations (a :func:`switched_run` on the feeds alone)."""
    out = RunResults()
    for runner, its in results:
        out.append((runner, list(its[:n])))
    return out


#: Elements compared at a time: a chunk's float64 temporaries take a few times 2 MB whatever the
#: output's size (compared whole, a 200 MB float32 output made 2.5 GB of them in graphfix's process;
#: 2^20 elements a chunk, 58 MB; 2^18, 15 MB, no slower: bench/compare_memory.py).
CHUNK_ELEMENTS = 1 << 18


def chunks(*arrays: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """The arrays (of one size) flattened, CHUNK_ELEMENTS at a time: views, not copies, of the
    contiguous arrays onnxruntime returns."""
    flat = [a.reshape(-1) for a in arrays]
    for start in range(0, flat[0].size, CHUNK_ELEMENTS):
        yield tuple(f[start:start + CHUNK_ELEMENTS] for f in flat)


def finite_max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return 0.0
    worst = 0.0
    for x, y in chunks(a, b):
        both = np.isfinite(x) & np.isfinite(y)
        if both.any():
            worst = max(worst, float(np.abs(x[both].astype(np.float64) - y[both]).max()))
    return worst


def iteration_result(outputs: dict[str, np.ndarray], runtime: float | None, runner_name: str) -> IterationResult:
    """polygraphy's IterationResult of these outputs, filled after it is made: given them at once,
    it sums their sizes to warn about big outputs, asking ``importlib`` whether torch is installed
    for each array (0.35 ms an output: 4 s of a run on a model with 2000 outputs)."""
    result = IterationResult(runtime=runtime, runner_name=runner_name)
    result.update(outputs)
    return result


def select_outputs(results: RunResults, names: list[str]) -> RunResults:
    """The same run restricted to ``names`` (the probe's original outputs are the baseline)."""
    out = RunResults()
    for runner, its in results:
        out.append((runner, [iteration_result({k: it[k] for k in names if k in it}, it.runtime, it.runner_name) for it in its]))
    return out


def region_diffs(results: RunResults, probes: dict[str, str], atol: float, rtol: float,
                 rounding: bool = False, precision: str | None = None) -> dict[str, OutputDiff]:
    """Per original tensor a region recomputes: original vs rewritten value, over every feed.

    Same rule as polygraphy's SimpleCompareFunc (an element passes when its absolute difference
    is <= atol or its relative difference is <= rtol; NaN where the original has NaN agrees), in
    plain numpy: polygraphy formats every array it compares, which dominates on many regions.
    ``rounding`` (automatic tolerance): atol is at least :data:`REGION_ULPS` units in the last place
    of the tensor's largest magnitude, what a few ops computing the same value in another order
    round to (a bilinear GridSample of correlation volumes near 40 differs by 1.5e-5 exactly so).
    ``precision``: the region's (graphfix.verify.precision.of_tensors): a float32 tensor a float16
    region computes is compared at float16's floor (:func:`tolerances`).
    """
    diffs: dict[str, OutputDiff] = {}
    for it in iterations(results):
        for name, probe in probes.items():
            ref = np.asarray(it[name])
            cur = _numpy_diff(ref, np.asarray(it[probe]), max(atol, rounding_floor(ref)) if rounding else atol, rtol, precision)
            prev = diffs.get(name)
            diffs[name] = cur if prev is None else _worse(prev, cur)
    return diffs


def _worse(prev: OutputDiff, cur: OutputDiff) -> OutputDiff:
    """One output's differences over two iterations."""
    return OutputDiff(max(prev.max_abs, cur.max_abs), max(prev.max_rel, cur.max_rel), prev.passed and cur.passed,
                      prev.note or cur.note, prev.noise_floor, prev.precision or cur.precision)


#: atol and rtol unless given (--atol/--rtol, which are then used exactly).
DEFAULT_TOLERANCE = 1e-5
#: A region's own rounding: this many units in the last place of its tensor's largest magnitude.
REGION_ULPS = 16
#: End to end, a fixed model is accepted within this many times the original model's noise floor
#: (:func:`noise_floor`): a rewrite rounds a few ops differently, and a deep model amplifies that
#: the way it amplifies its own rounding.
NOISE_MULTIPLE = 10


def rounding_floor(ref: np.ndarray) -> float:
    """:data:`REGION_ULPS` ulps of the largest finite magnitude of a float tensor (0 for others)."""
    if ref.dtype.kind != "f" or ref.size == 0:
        return 0.0
    largest = 0.0
    for (part,) in chunks(ref):
        finite = np.abs(part[np.isfinite(part)])
        largest = max(largest, float(finite.max())) if finite.size else largest
    return float(REGION_ULPS * np.finfo(ref.dtype).eps * largest)


#: Tolerance floors for low-precision values: 4 units in the last place, since a rewrite that
#: computes the same value in more ops rounds at each of them. At the float32 defaults (1e-5) a
#: correct fp16 rewrite (epsilon 9.8e-4) would be rolled back.
_ULPS = 4


def tolerances(dtype: np.dtype, atol: float, rtol: float, precision: str | None = None) -> tuple[float, float]:
    """(atol, rtol) for comparing values of ``dtype`` computed in ``precision`` (graphfix.verify.precision:
    "float16"/"bfloat16" when the computation went through one, else None): the given ones, raised
    to 4 ulps of the lowest of the two where that is fp16 or bf16 (a float32 output cast from
    float16 math carries float16's rounding); float32 and wider computations keep exactly what
    was asked."""
    eps = max(precision_mod.epsilon(dtype), precision_mod.epsilon(precision))
    if not eps:
        return atol, rtol
    floor = _ULPS * eps
    return max(atol, floor), max(rtol, floor)


def _numpy_diff(ref: np.ndarray, cand: np.ndarray, atol: float, rtol: float, precision: str | None = None) -> OutputDiff:
    """polygraphy's elementwise rule, in float64, chunk by chunk (:data:`CHUNK_ELEMENTS`). NaN where
    the original has NaN is agreement (polygraphy alone would fail any NaN). ``precision``: the
    float type the value was computed in, where lower than its own (graphfix.verify.precision)."""
    if ref.shape != cand.shape or ref.dtype != cand.dtype:
        return OutputDiff(float("inf"), float("inf"), False, f"{ref.dtype}{list(ref.shape)} became {cand.dtype}{list(cand.shape)}")
    if ref.size == 0:
        return OutputDiff(0.0, 0.0, True)
    if ref.dtype.kind not in _MAGNITUDES:
        return equality_diff(ref, cand)
    atol, rtol = tolerances(ref.dtype, atol, rtol, precision)
    widened = _widened(ref.dtype, precision)
    abs_max, rel_max, ok, nan_moved = [], [], True, 0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for x, y in chunks(ref, cand):
            a, b = x.astype(np.float64), y.astype(np.float64)
            a_nan, b_nan = np.isnan(a), np.isnan(b)
            nan_moved += int(np.count_nonzero(a_nan != b_nan))
            same = (a == b) | (a_nan & b_nan)  # equal infinities agree, and NaN where the original has NaN
            absdiff = np.abs(a - b)
            absdiff[same] = 0.0
            reldiff = absdiff / np.abs(a)
            reldiff[same] = 0.0
            ok = ok and bool(((absdiff <= atol) | (reldiff <= rtol)).all())
            abs_max.append(np.fmax.reduce(absdiff))
            rel_max.append(np.fmax.reduce(reldiff))
    if nan_moved:
        return OutputDiff(float("nan"), float("nan"), False, f"NaN at {nan_moved} position(s) where the other model has a number")
    return OutputDiff(float(np.fmax.reduce(abs_max)), float(np.fmax.reduce(rel_max)), ok, precision=widened)


def equality_diff(ref: np.ndarray, cand: np.ndarray) -> OutputDiff:
    """Outputs with no difference to measure (strings: onnxruntime returns object arrays of str)
    agree when every element is equal; a tolerance means nothing to them."""
    unequal = int(np.count_nonzero(np.asarray(ref != cand, dtype=bool)))
    if not unequal:
        return OutputDiff(0.0, 0.0, True)
    return OutputDiff(float("inf"), float("inf"), False, f"{unequal} of {ref.size} {ref.dtype} values differ (compared for equality)")


def _widened(dtype: np.dtype, precision: str | None) -> str | None:
    """``precision`` where it, not the value's own type, set the tolerance (the report says so)."""
    return precision if precision_mod.epsilon(precision) > precision_mod.epsilon(dtype) else None


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
    #: the low float type ("float16", "bfloat16") the value was computed in, when that type and
    #: not the value's own set the tolerance (a float32 output cast from float16 math)
    precision: str | None = None
    #: an inexact step's deviation (:func:`deviation`): in quantization steps of the output's scale,
    #: or, for an output with no scale, as a fraction of the output's peak magnitude
    steps: float | None = None
    of_peak: float | None = None
    bound: str = ""

    def as_dict(self) -> dict[str, object]:
        extra: dict[str, object] = {"note": self.note} if self.note else {}
        if self.noise_floor is not None:
            extra["noise_floor"] = self.noise_floor
        if self.precision is not None:
            extra["precision"] = self.precision
        for key in ("steps", "of_peak"):
            if getattr(self, key) is not None:
                extra[key] = getattr(self, key)
        if self.bound:
            extra["bound"] = self.bound
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "passed": self.passed, **extra}


def compare(reference: RunResults, candidate: RunResults, atol: float, rtol: float,
            noise: dict[str, float] | None = None, precision: dict[str, str] | None = None) -> dict[str, OutputDiff]:
    """Worst difference per output over all iterations (polygraphy SimpleCompareFunc's elementwise
    rule, in numpy as :func:`region_diffs`: polygraphy formats and logs statistics of every array
    it compares, 4 ms an output, which made a model with 8000 outputs take minutes); outputs of
    fp16/bf16, or computed through them (``precision``, per output: graphfix.verify.precision.computed_in),
    at no less than :func:`tolerances`' floor; with ``noise``, the original model's noise floor per
    output, atol is at least :data:`NOISE_MULTIPLE` times it."""
    diffs: dict[str, OutputDiff] = {}
    for ref_it, cand_it in zip(iterations(reference), iterations(candidate), strict=True):
        for name in ref_it:
            if name not in cand_it:
                diffs[name] = OutputDiff(float("inf"), float("inf"), False, "output missing")
                continue
            floor = (noise or {}).get(name)
            cur = _numpy_diff(np.asarray(ref_it[name]), np.asarray(cand_it[name]),
                              max(atol, NOISE_MULTIPLE * floor) if floor else atol, rtol, (precision or {}).get(name))
            if not cur.note:  # compared numbers, not a changed shape or NaNs moved
                cur.noise_floor = floor
            prev = diffs.get(name)
            diffs[name] = cur if prev is None else _worse(prev, cur)
    return diffs


def sorted_diffs(reference: RunResults, candidate: RunResults, names: list[str], atol: float, rtol: float,
                 noise: dict[str, float] | None = None, precision: dict[str, str] | None = None) -> dict[str, OutputDiff]:
    """Per output, its values compared as sorted (the same multiset), worst over the iterations:
    what a tie-sensitive output (TopK of 300 over 8400 anchors at near-ties) keeps when near-tied
    elements come out in another order. Tolerances as :func:`compare` (``noise``: the floor)."""
    diffs: dict[str, OutputDiff] = {}
    for ref_it, cand_it in zip(iterations(reference), iterations(candidate), strict=True):
        for name in names:
            ref, cand = np.asarray(ref_it[name]), np.asarray(cand_it[name])
            floor = (noise or {}).get(name) or 0.0
            cur = _numpy_diff(np.sort(ref, axis=None), np.sort(cand, axis=None), max(atol, NOISE_MULTIPLE * floor), rtol,
                              (precision or {}).get(name)) \
                if ref.shape == cand.shape else OutputDiff(float("inf"), float("inf"), False, "shapes differ")
            prev = diffs.get(name)
            diffs[name] = cur if prev is None else _worse(prev, cur)
    return diffs


#: numpy kinds of values with a magnitude (bool, ints, floats, complex); others (strings) are
#: compared for equality (:func:`equality_diff`).
_MAGNITUDES = "biufc"


def deviation(reference: RunResults, candidate: RunResults, scales: dict[str, float], max_steps: float,
              max_of_peak: float) -> dict[str, OutputDiff]:
    """An inexact rewrite's deviation per output, worst over the iterations (graphfix.pipeline.inexact):
    an output with a quantization scale in ``scales`` (read from a DequantizeLinear; integer
    outputs count in units of 1) in steps of it, ``max_abs / scale``, passing within ``max_steps``;
    any other in ``max_abs / max |original|`` (its peak over every iteration), passing within
    ``max_of_peak``. Shapes, dtypes and NaN positions must agree as in :func:`compare`."""
    worst: dict[str, OutputDiff] = {}
    peaks: dict[str, float] = {}
    for ref_it, cand_it in zip(iterations(reference), iterations(candidate), strict=True):
        for name in ref_it:
            ref = np.asarray(ref_it[name])
            cand = np.asarray(cand_it[name]) if name in cand_it else None
            cur = _numpy_diff(ref, cand, np.inf, np.inf) if cand is not None else \
                OutputDiff(float("inf"), float("inf"), False, "output missing")
            if ref.dtype.kind in _MAGNITUDES:
                finite = np.abs(ref[np.isfinite(ref)]) if ref.dtype.kind == "f" else np.abs(ref)
                peaks[name] = max(peaks.get(name, 0.0), float(finite.max()) if finite.size else 0.0)
            prev = worst.get(name)
            worst[name] = cur if prev is None else _worse(prev, cur)
    for name, d in worst.items():
        kind = np.asarray(iterations(reference)[0][name]).dtype.kind
        scale = scales.get(name, 1.0 if kind in "biu" else None)
        if kind not in _MAGNITUDES:  # strings: nothing to deviate by, compared for equality
            d.bound = "equal"
        elif scale is not None:
            d.steps, d.bound = d.max_abs / scale, f"<= {max_steps:g} step(s) of scale {scale:.3g}"
            d.passed = d.passed and d.steps <= max_steps
        else:
            d.of_peak = d.max_abs / peaks[name] if peaks[name] else (0.0 if d.max_abs == 0 else float("inf"))
            d.bound = f"<= {100 * max_of_peak:g} % of its peak {peaks[name]:.3g}"
            d.passed = d.passed and d.of_peak <= max_of_peak
    return worst
