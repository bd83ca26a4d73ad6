"""The ordered pass pipeline with per-pass onnxruntime verification and rollback.

Verification cost: one onnxruntime session for the input model, plus one per pass that changed
the graph (a pass that matched nothing is not re-run). The inputs are generated once. A pass
whose outputs differ beyond tolerance, that raises, or that produces an invalid model is rolled
back (the graph before it is kept) and reported; ``strict`` stops instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphfix import passes as registry
from graphfix import verify
from graphfix.errors import GraphfixError
from graphfix.model_io import first_line, passes_full_check, runtime_compatible
from graphfix.passes.base import Pass, PassResult
from graphfix.report import ERROR, KEPT, ROLLED_BACK, UNCHANGED, UNVERIFIED, PassRecord, Report
from graphfix.trt.versions import TrtVersion


class StrictFailure(GraphfixError):
    """--strict: a pass would have been rolled back (exit 1, nothing written)."""

    exit_code = 1


@dataclass
class Settings:
    passes: str | list[str | Pass] | tuple[str | Pass, ...] = "all"
    skip: tuple[str, ...] = ()
    trt: str | None = None
    force: tuple[str, ...] = ()
    verify: bool = True
    strict: bool = False
    atol: float = 1e-5
    rtol: float = 1e-5
    seed: int = 1
    iterations: int = 1
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    val_range: dict[str, tuple[float, float]] = field(default_factory=dict)
    feeds: list[dict[str, np.ndarray]] | None = None

    def public(self) -> dict[str, Any]:
        return {
            "passes": self.passes if isinstance(self.passes, str) else [getattr(p, "name", p) for p in self.passes],
            "skip": list(self.skip), "trt": self.trt, "force": list(self.force), "verify": self.verify,
            "strict": self.strict, "atol": self.atol, "rtol": self.rtol, "seed": self.seed,
            "iterations": self.iterations,
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "val_range": {k: list(v) for k, v in self.val_range.items()},
        }


@dataclass
class Outcome:
    model: onnx.ModelProto
    report: Report
    feeds: list[dict[str, np.ndarray]]
    baseline: Any = None  # polygraphy RunResults of the input model
    final: Any = None  # RunResults of the returned model


def _trt_version(text: str | None) -> TrtVersion | None:
    if text is None:
        return None
    try:
        return TrtVersion(text)
    except ValueError as exc:
        raise GraphfixError(f"--trt: {exc}") from exc


def choose_passes(model: onnx.ModelProto, settings: Settings) -> list[Pass]:
    names = settings.passes
    if (isinstance(names, str) and names.strip() == "auto") or list(names) == ["auto"]:
        if settings.trt is None:
            raise GraphfixError("--passes auto needs --trt VERSION (the TensorRT release to target)")
        from graphfix.trt.check import check_model, passes_for

        wanted = passes_for(check_model(model, settings.trt))
        return [p for p in registry.select("all", settings.skip) if p.name in wanted]
    if not isinstance(names, str) and any(isinstance(n, Pass) for n in names):
        custom = [n if isinstance(n, Pass) else registry.get(n) for n in names]
        return sorted((p for p in custom if p.name not in settings.skip), key=lambda p: (p.order, p.name))
    return registry.select(names, settings.skip)


def run(model: onnx.ModelProto, settings: Settings, source: str | None = None, target: str | None = None) -> Outcome:
    start = time.perf_counter()
    trt = _trt_version(settings.trt)
    for name in settings.force:
        registry.get(name)
    chosen = choose_passes(model, settings)
    report = Report(source, target, settings.public())
    counter = verify.SessionCounter()

    feeds: list[dict[str, np.ndarray]] = []
    baseline = None
    if settings.verify:
        feeds = settings.feeds or verify.make_inputs(model, settings.input_shapes, settings.val_range, settings.seed, settings.iterations)
        report.inputs = {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in feeds[0].items()}
        try:
            baseline = verify.run(model, feeds, "original", counter)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
            raise GraphfixError(
                f"onnxruntime cannot run the input model, so rewrites cannot be verified ({first_line(exc)}); "
                "fix the inputs (--input-shapes/--val-range/--load-inputs) or use --no-verify", source
            ) from exc
    full_check = passes_full_check(model)

    current, current_results = model, baseline
    for p in chosen:
        t0 = time.perf_counter()
        record, candidate = _run_pass(p, current, trt, p.name in settings.force)
        report.passes.append(record)
        if candidate is not None:
            reason = _invalid(candidate.model, full_check)
            if reason:
                record.verdict, record.reason = ROLLED_BACK, f"rolled back: the rewritten model is invalid ({reason})"
            elif settings.verify:
                results = _verify(candidate.model, feeds, baseline, settings, record, counter)
                if record.verdict == KEPT:
                    current, current_results = candidate.model, results
            else:
                record.verdict = UNVERIFIED
                current = candidate.model
        record.seconds = round(time.perf_counter() - t0, 4)
        if settings.strict and record.verdict in (ROLLED_BACK, ERROR):
            report.sessions = counter.count
            raise StrictFailure(f"--strict: pass {p.name} {record.verdict}: {record.reason}", source)

    report.sessions = counter.count
    if settings.trt is not None:
        report.trt = _trt_summary(model, current, settings.trt)
    report.seconds = round(time.perf_counter() - start, 4)
    return Outcome(current, report, feeds, baseline, current_results)


def _run_pass(p: Pass, model: onnx.ModelProto, trt: TrtVersion | None, force: bool) -> tuple[PassRecord, PassResult | None]:
    record = PassRecord(p.name, UNCHANGED)
    try:
        result = p.apply(model, trt=trt, force=force)
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - a buggy pass must not take the user's run down
        record.verdict, record.reason = ERROR, f"rolled back: the pass raised {type(exc).__name__}: {first_line(exc)}"
        return record, None
    record.matched, record.rewritten = result.matched, result.rewritten
    record.nodes_before, record.nodes_after = result.nodes_before, result.nodes_after
    record.findings = [f.as_dict() for f in result.findings]
    return record, (result if result.changed else None)


def _invalid(model: onnx.ModelProto, full_check: bool) -> str | None:
    try:
        onnx.checker.check_model(runtime_compatible(model), full_check=full_check)
    except Exception as exc:  # noqa: BLE001
        return first_line(exc)
    return None


def _verify(model, feeds, baseline, settings: Settings, record: PassRecord, counter) -> Any:
    try:
        results = verify.run(model, feeds, record.name, counter)
    except Exception as exc:  # noqa: BLE001
        record.verdict, record.reason = ROLLED_BACK, f"rolled back: onnxruntime cannot run the rewritten model ({first_line(exc)})"
        return None
    diffs = verify.compare(baseline, results, settings.atol, settings.rtol)
    record.outputs = {k: d.as_dict() for k, d in diffs.items()}
    bad = [k for k, d in diffs.items() if not d.passed]
    if bad:
        worst = ", ".join(f"{k} (max abs {diffs[k].max_abs:.3g}, max rel {diffs[k].max_rel:.3g}{'; ' + diffs[k].note if diffs[k].note else ''})" for k in bad)
        record.verdict = ROLLED_BACK
        record.reason = f"rolled back: outputs differ beyond atol={settings.atol:g}/rtol={settings.rtol:g}: {worst}"
        return None
    record.verdict = KEPT
    return results


def _trt_summary(before: onnx.ModelProto, after: onnx.ModelProto, trt: str) -> dict[str, Any]:
    """`graphfix check` before and after: what the target still rejects."""
    from graphfix.trt.check import check_model

    first, last = check_model(before, trt), check_model(after, trt)
    return {"version": trt, "before": first.as_dict(), "after": last.as_dict()}
