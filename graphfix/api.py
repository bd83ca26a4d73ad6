"""The Python API for deploy scripts: ``graphfix.fix(path_or_model, passes="all", ...)``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from graphfix import pipeline, report
from graphfix.errors import GraphfixError
from graphfix.model_io import check_graph, load_model, save_model
from graphfix.passes.base import Pass
from graphfix.report import Report


@dataclass
class FixResult:
    """The fixed model and what was done to it."""

    model: onnx.ModelProto
    report: Report
    outcome: pipeline.Outcome

    @property
    def ok(self) -> bool:
        return self.report.status == "ok"

    def save(self, path: str | os.PathLike) -> None:
        """Atomic write with an IR version onnxruntime reads."""
        save_model(self.model, path)

    def save_report(self, path: str | os.PathLike) -> None:
        """JSON (or ``.md``); a JSON report gets polygraphy inputs/outputs files beside it."""
        if not str(path).endswith(".md") and self.outcome.baseline is not None:
            self.report.files = save_polygraphy_files(self.outcome, Path(path))
        report.write(self.report, path)


def save_polygraphy_files(outcome: pipeline.Outcome, path: Path) -> dict[str, str]:
    """Feeds and RunResults in polygraphy's JSON formats (``--load-inputs`` / ``--load-outputs``)."""
    from polygraphy.comparator import RunResults
    from polygraphy.json import save_json

    from graphfix.verify import quiet_polygraphy

    stem = path.with_suffix("")
    inputs_path, outputs_path = Path(f"{stem}.inputs.json"), Path(f"{stem}.outputs.json")
    results = RunResults()
    results.append(("graphfix-original", outcome.baseline[0][1]))
    if outcome.final is not None and outcome.final is not outcome.baseline:
        results.append(("graphfix-fixed", outcome.final[0][1]))
    with quiet_polygraphy():
        save_json(outcome.feeds, str(inputs_path))
        results.save(str(outputs_path))
    return {"polygraphy_inputs": str(inputs_path), "polygraphy_outputs": str(outputs_path)}


def _shape_sets(given) -> list[dict[str, tuple[int, ...]]]:
    if not given:
        return []
    sets = [given] if isinstance(given, dict) else list(given)
    return [{k: tuple(int(d) for d in v) for k, v in s.items()} for s in sets]


def fix(
    model: str | os.PathLike | onnx.ModelProto,
    passes: str | Sequence[str | Pass] = "all",
    *,
    skip: Sequence[str] = (),
    trt: str | None = None,
    force: Sequence[str] = (),
    verify: bool = True,
    verify_each: bool = False,
    strict: bool = False,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    seed: int = 1,
    iterations: int = 1,
    input_shapes: dict[str, Sequence[int]] | Sequence[dict[str, Sequence[int]]] | None = None,
    val_range: dict[str, tuple[float, float]] | None = None,
    inputs: list[dict[str, np.ndarray]] | None = None,
    output: str | os.PathLike | None = None,
    progress=None,
    profile_shapes: Sequence[dict[str, Sequence[int]]] = (),
) -> FixResult:
    """Run the pass pipeline on a model (path or ModelProto), verifying each pass on onnxruntime.

    ``passes``: "all", "auto" (with ``trt``), a comma-separated string, or a list of pass names
    and/or ``Pass`` objects (your own passes run in the order given by their ``order``).
    A rewrite whose outputs differ beyond ``atol``/``rtol`` is rolled back, node by node, and
    reported (``strict=True`` raises instead); ``verify_each`` checks pass by pass instead.
    ``input_shapes``: one dict of shapes, or several (each is verified); without it the
    verification shapes are found by trying. ``output`` writes the fixed model atomically.
    """
    source = None
    if isinstance(model, onnx.ModelProto):
        check_graph(model, "<model>")
    else:
        source = str(model)
        model = load_model(model)
    if output is not None:
        from graphfix.model_io import check_output_path

        if source is not None:
            check_output_path(source, output)
        elif not Path(output).parent.exists():
            raise GraphfixError(f"output directory {Path(output).parent} does not exist", str(output))
    settings = pipeline.Settings(
        passes=passes if isinstance(passes, str) else tuple(passes), skip=tuple(skip), trt=trt,
        force=tuple(force), verify=verify, verify_each=verify_each, strict=strict, atol=atol, rtol=rtol, seed=seed,
        iterations=iterations, input_shapes=_shape_sets(input_shapes),
        profile_shapes=_shape_sets(list(profile_shapes)), val_range=dict(val_range or {}), feeds=inputs,
    )
    outcome = pipeline.run(model, settings, source, None if output is None else str(output), progress)
    result = FixResult(outcome.model, outcome.report, outcome)
    if output is not None:
        result.save(output)
    return result
