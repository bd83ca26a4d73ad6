"""Comparing outputs with polygraphy's Comparator and graphfix's tolerances (dtype rounding, the
original's noise floor, NaN alignment, ties).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from polygraphy.comparator import RunResults
from polygraphy.comparator.compare import SimpleCompareFunc
from polygraphy.comparator.struct import IterationResult

from graphfix.verify import precision as precision_mod
from graphfix.verify.inputs import quiet_polygraphy


def first_iterations(results: RunResults, n: int) -> RunResults:
    """The same run restricted to its first ``n`` iterations (a :func:`switched_run` on the feeds alone)."""
    out = RunResults()
    for runner, its in results:
        out.append((runner, list(its[:n])))
    return out


def finite_max_abs(a: np.ndarray, b: np.ndarray) -> float:
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
    finite = np.abs(ref[np.isfinite(ref)])
    return float(REGION_ULPS * np.finfo(ref.dtype).eps * finite.max()) if finite.size else 0.0


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
    atol, rtol = tolerances(ref.dtype, atol, rtol, precision)
    widened = _widened(ref.dtype, precision)
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
    return OutputDiff(float(np.nanmax(absdiff)), float(np.nanmax(reldiff)), bool(ok.all()), precision=widened)


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

    def as_dict(self) -> dict[str, object]:
        extra = {"note": self.note} if self.note else {}
        if self.noise_floor is not None:
            extra["noise_floor"] = self.noise_floor
        if self.precision is not None:
            extra["precision"] = self.precision
        return {"max_abs": self.max_abs, "max_rel": self.max_rel, "passed": self.passed, **extra}


def compare(reference: RunResults, candidate: RunResults, atol: float, rtol: float,
            noise: dict[str, float] | None = None, precision: dict[str, str] | None = None) -> dict[str, OutputDiff]:
    """Worst difference per output over all iterations (polygraphy SimpleCompareFunc; outputs of
    fp16/bf16, or computed through them (``precision``, per output: graphfix.verify.precision.computed_in),
    at no less than :func:`tolerances`' floor; with ``noise``, the original model's noise floor per
    output, atol is at least :data:`NOISE_MULTIPLE` times it)."""
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
                low = (precision or {}).get(name)
                tol = tolerances(ref.dtype, atol, rtol, low)
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
                cur = OutputDiff(max_abs, max_rel, bool(result), noise_floor=floor, precision=_widened(ref.dtype, low))
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
