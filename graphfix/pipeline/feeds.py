"""Verification feeds, chosen on first use (a run that rewrites nothing opens no session), with
the shape search when inputs are dynamic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from graphfix.errors import GraphfixError, OverMemoryBudget, first_line
from graphfix.pipeline.settings import Settings
from graphfix.report.model import Report
from graphfix.verify import inputs as inputs_mod
from graphfix.verify import sessions
from graphfix.verify import shapes as shapes_mod


class _LazyFeeds:
    """Verification's feeds, chosen on first use: the shape search (a session of the input model,
    runs at candidate shapes) is paid only by a run that rewrote something (a pass, --simplify).
    A run whose passes changed nothing writes the model without opening a session."""

    def __init__(self, model: onnx.ModelProto, settings: Settings, report: Report, source: str | None,
                 counter: sessions.SessionCounter, step) -> None:
        self.model, self.settings, self.report, self.source, self.counter, self.step = model, settings, report, source, counter, step
        self.chosen: list[dict[str, np.ndarray]] | None = None
        self.decisions_added = False

    def get(self, decided: tuple = ([], {})) -> list[dict[str, np.ndarray]]:
        """The feeds (searched once); with decisions (graphfix.analysis.discrete), at least two input sets:
        near-ties show at more than one input."""
        if self.chosen is None:
            self.step("choosing verification inputs")
            self.chosen = _feeds(self.model, self.settings, self.report, self.source, self.counter)
        if decided[1] and len(self.chosen) < 2 and not self.settings.feeds and not self.decisions_added:
            self.decisions_added = True
            shapes = {k: tuple(v) for k, v in self.report.shapes["shapes"][0].items()}
            self.chosen = self.chosen + inputs_mod.make_inputs(self.model, shapes, self.settings.val_range, self.settings.seed + 1, 1)
        return self.chosen

    def unused(self) -> None:
        """Nothing was rewritten: no feeds, no session; the report says why."""
        if self.chosen is None:
            self.report.verification = "none needed: nothing was rewritten (no onnxruntime session)"
            if not self.report.shapes and not self.settings.feeds:
                self.report.shapes = _unrun_shapes(self.model, self.settings, self.source)


def _unrun_shapes(model: onnx.ModelProto, settings: Settings, source: str | None) -> dict[str, Any]:
    """The report's shapes when nothing was verified: the given ones, else the first candidates
    the shape search would try, not run (the printed TensorRT profile needs shapes for dynamic
    inputs; graphfix did not run the model there)."""
    why = "not needed: nothing was rewritten, so nothing was verified (no onnxruntime session)"
    try:
        choice = shapes_mod.choose(model, settings.input_shapes, lambda shapes: None, source)
    except GraphfixError:
        return {"reason": why, "shapes": []}
    shapes = [s for s in choice.shapes if s]
    if shapes:
        why += f"; the shapes below, for the printed TensorRT profile only, were not run ({choice.reason})"
    return {"reason": why, "shapes": [{k: list(v) for k, v in s.items()} for s in shapes],
            "guessed": choice.guessed if shapes else []}


def _feeds(model: onnx.ModelProto, settings: Settings, report: Report, source: str | None,
           counter: sessions.SessionCounter) -> list[dict[str, np.ndarray]]:
    if settings.feeds:
        report.shapes = {"reason": "loaded with --load-inputs", "shapes": []}
        return settings.feeds
    session, defaults_tried = None, False

    def attempt(feed: dict) -> list:
        nonlocal session
        if session is None:
            session = sessions.session(model, settings.base_dir, counter.tuned)
            report.search_sessions += 1
        return session.run(None, feed)

    def runs(shapes: dict) -> str | None:
        nonlocal session, defaults_tried
        try:
            feed = inputs_mod.make_inputs(model, shapes, settings.val_range, settings.seed, 1)[0]
            try:
                first = attempt(feed)
            except GraphfixError:
                raise
            except Exception:  # noqa: BLE001 - once, onnxruntime's defaults (sessions.run says why)
                if not counter.tuned or defaults_tried:
                    raise
                session, counter.tuned, defaults_tried = None, False, True
                try:
                    first = attempt(feed)
                except Exception:
                    session, counter.tuned = None, True
                    raise
            if settings.input_shapes:
                return None  # the user's shapes: used as given
            return sessions.unusable(first, attempt(feed), [o.name for o in model.graph.output])
        except OverMemoryBudget as exc:  # more than the estimate said: the next candidate may fit
            if settings.input_shapes:
                raise
            return exc.what
        except GraphfixError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types
            return first_line(exc)

    choice = shapes_mod.choose(model, settings.input_shapes, runs, source, settings.max_memory)
    for extra in settings.profile_shapes:
        full = {**choice.shapes[0], **extra}
        if full in choice.shapes:
            continue
        try:
            error = runs(full)
        except GraphfixError as exc:
            error = str(exc)
        if error is None:
            choice.shapes.append(full)
        else:
            report.notes.append(f"profile shapes {shapes_mod.describe(full)} not verified: onnxruntime cannot run them ({error})")
    report.shapes = {"reason": choice.reason, "tried": choice.tried,
                     "shapes": [{k: list(v) for k, v in s.items()} for s in choice.shapes], "guessed": choice.guessed}
    feeds = []
    for s in choice.shapes:
        feeds += inputs_mod.make_inputs(model, s, settings.val_range, settings.seed, settings.iterations)
    return feeds
