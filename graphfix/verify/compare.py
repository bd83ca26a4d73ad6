"""Comparing outputs with polygraphy's Comparator and graphfix's tolerances (dtype rounding, the
original's noise floor, NaN alignment, ties).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from polygraphy.comparator import RunResults
from polygraphy.comparator.compare import SimpleCompareFunc
from polygraphy.comparator.struct import IterationResult

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
NOISE_MULTIPLE = 10


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
    #: an inexact step's deviation (:func:`deviation`): in quantization steps of the output's scale,
    #: or, for an output with no scale, as a fraction of the output's peak magnitude
    steps: float | None = None
    of_peak: float | None = None
    bound: str = ""

    def as_dict(self) -> dict[str, object]:
        extra: dict[str, object] = {"note": self.note} if self.note else {}
        if self.noise_floor is not None:
            extra["noise_floor"] = self.noise_floor
        for key in ("steps", "of_peak"):
            if getattr(self, key) is not None:
                extra[key] = getattr(self, key)
        if self.bound:
            extra["bound"] = self.bound
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
            finite = np.abs(ref[np.isfinite(ref)]) if ref.dtype.kind == "f" else np.abs(ref)
            peaks[name] = max(peaks.get(name, 0.0), float(finite.max()) if finite.size else 0.0)
            prev = worst.get(name)
            worst[name] = cur if prev is None else OutputDiff(max(prev.max_abs, cur.max_abs), max(prev.max_rel, cur.max_rel),
                                                              prev.passed and cur.passed, prev.note or cur.note)
    for name, d in worst.items():
        scale = scales.get(name, 1.0 if np.asarray(iterations(reference)[0][name]).dtype.kind in "biu" else None)
        if scale is not None:
            d.steps, d.bound = d.max_abs / scale, f"<= {max_steps:g} step(s) of scale {scale:.3g}"
            d.passed = d.passed and d.steps <= max_steps
        else:
            d.of_peak = d.max_abs / peaks[name] if peaks[name] else (0.0 if d.max_abs == 0 else float("inf"))
            d.bound = f"<= {100 * max_of_peak:g} % of its peak {peaks[name]:.3g}"
            d.passed = d.passed and d.of_peak <= max_of_peak
    return worst
