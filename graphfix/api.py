"""The Python API for deploy scripts: ``graphfix.fix(path_or_model, passes="all", ...)``."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphfix.errors import OnnxruntimeDied
from graphfix.fs import transaction as transaction_mod
from graphfix.onnxio import dims as dims_mod
from graphfix.onnxio import paths
from graphfix.onnxio.load import load_working
from graphfix.onnxio.proto import Assembled, proto_text
from graphfix.onnxio.save import save_model
from graphfix.onnxio.validate import check_graph
from graphfix.passes.base import Pass
from graphfix.pipeline import load_checks
from graphfix.pipeline import run as run_mod
from graphfix.pipeline import set_inputs as set_inputs_mod
from graphfix.pipeline import settings as settings_mod
from graphfix.report import writer as writer_mod
from graphfix.report.model import Report
from graphfix.runtime import worker as runtime_worker
from graphfix.settings import checks as options
from graphfix.settings.syntax import pass_names
from graphfix.verify.compare import iteration_result
from graphfix.verify.inputs import load_inputs, quiet_polygraphy
from graphfix.verify.shapes import DEFAULT_MAX_MEMORY


@dataclass
class FixResult:
    """The fixed model and what was done to it."""

    report: Report
    outcome: settings_mod.Outcome

    @property
    def model(self) -> onnx.ModelProto:
        return self.outcome.model

    @property
    def ok(self) -> bool:
        return self.report.status == "ok"

    def save(self, path: str | os.PathLike, external_data: str | None = None) -> str | None:
        """Atomic write with an IR version onnxruntime reads (never over the input or its weights).

        A model with external data (or over 2 GiB, or given ``external_data``) is written as
        ``path`` plus its weights file (``<path>.data`` or ``external_data``); returns that path.
        """
        options.check_arguments({"path": path, "external_data": external_data}, call="save")
        paths.plan_fix(self._source(), path, external_data=external_data)
        with transaction_mod.transaction():
            return save_model(self.outcome.fixed, path, self.outcome.base_dir, external_data)

    def save_report(self, path: str | os.PathLike) -> None:
        """JSON, ``.md`` or ``.html`` (by extension); a JSON report gets polygraphy inputs/outputs files beside it.
        All of them are written, or none."""
        options.check_arguments({"path": path}, call="save_report")
        plan = paths.plan_fix(self._source(), None, [path])
        if self.report.output is not None:
            plan.writes.insert(0, paths.Use("the output", Path(self.report.output)))
            paths.check_collisions(plan)
        with transaction_mod.transaction():
            write_report_files(self, path)

    def _source(self) -> str | None:
        source = self.report.input
        return source if source is not None and Path(source).is_file() else None


def write_report_files(result: FixResult, path: str | os.PathLike) -> None:
    """The report and its sidecars through the atomic writer (callers plan the paths first)."""
    if paths.sidecars(path) and result.outcome.baseline is not None:
        result.report.files = save_polygraphy_files(result.outcome, Path(path))
    writer_mod.write(result.report, path)


def save_polygraphy_files(outcome: settings_mod.Outcome, path: Path) -> dict[str, str]:
    """Feeds and RunResults in polygraphy's JSON formats (``--load-inputs`` / ``--load-outputs``)."""
    from polygraphy.comparator import RunResults
    from polygraphy.json import to_json


    inputs_path, outputs_path = paths.sidecars(path)
    results = RunResults()
    results.append(("graphfix-original", _savable(outcome.baseline[0][1])))
    if outcome.final is not None and outcome.final is not outcome.baseline:
        results.append(("graphfix-fixed", _savable(outcome.final[0][1])))
    with quiet_polygraphy():
        feeds_json, results_json = to_json(outcome.feeds), to_json(results)
    transaction_mod.write_atomic(inputs_path, feeds_json.encode(), "report")
    transaction_mod.write_atomic(outputs_path, results_json.encode(), "report")
    return {"polygraphy_inputs": str(inputs_path), "polygraphy_outputs": str(outputs_path)}


def _savable(its: list) -> list:
    """Iterations polygraphy can write (``np.save`` without pickle): string outputs, which
    onnxruntime returns as object arrays, as numpy unicode arrays."""
    return [it if not any(v.dtype == object for v in it.values()) else
            iteration_result({k: v.astype(str) if v.dtype == object else v for k, v in it.items()}, it.runtime, it.runner_name)
            for it in its]


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
    atol: float | None = None,
    rtol: float | None = None,
    seed: int = 1,
    iterations: int = 1,
    input_shapes: dict[str, Sequence[int]] | Sequence[dict[str, Sequence[int]]] | None = None,
    val_range: dict[str, tuple[float, float]] | None = None,
    inputs: list[dict[str, np.ndarray]] | str | os.PathLike | None = None,
    output: str | os.PathLike | None = None,
    progress=None,
    profile_shapes: Sequence[dict[str, Sequence[int]]] = (),
    fix_shapes: dict[str, Sequence[int]] | None = None,
    set_inputs: Mapping[str, Any] | None = None,
    simplify: bool = False,
    convert_opset: int | None = None,
    max_memory: str | int = DEFAULT_MAX_MEMORY,
    timeout: float | None = None,
    requantize_symmetric: bool = False,
    dequantize_dynamic: bool = False,
) -> FixResult:
    """Run the pass pipeline on a model (path or ModelProto), verifying each pass on onnxruntime.

    ``passes``: "all", "auto" (with ``trt``), a comma-separated string, or a list of pass names
    and/or ``Pass`` objects (a list holding your own passes runs in the order given; place them
    in the pipeline by name with ``graphfix.passes.insert(pass, before=/after=NAME)``).
    A rewrite whose outputs differ beyond ``atol``/``rtol`` is rolled back, node by node, and
    reported (None, the default: 1e-5, each region's float32 rounding and the model's own noise
    floor end to end, as the README's verification section explains; given: exactly those) (``strict=True`` raises instead); ``verify_each`` checks pass by pass instead.
    ``input_shapes``: one dict of shapes, or several (each is verified); without it the
    verification shapes are found by trying. ``output`` writes the fixed model atomically.
    ``progress``: called with what the run is doing (``"phase: detail"``), e.g. to show a status line.
    ``inputs``: feeds (one dict per iteration) or a ``.npz``/polygraphy JSON file of them.
    ``fix_shapes``: input dims to freeze in the written model (the shape arithmetic that then
    folds is folded; verified against the original at those shapes). ``set_inputs``: graph inputs
    to freeze to a value (``{"sr": 16000, "use_cache_branch": False}``, numbers, bools or small
    arrays of the input's type and shape): what follows is folded and the Ifs they decide inlined,
    verified against the original fed those values; the written model's metadata
    (``graphfix.set_inputs``) and the report say so. ``simplify``: onnxsim first
    (``graphfix[simplify]``), verified and rolled back like a pass. ``convert_opset``: convert the
    model to that default-domain opset first with onnx.version_converter (what `graphfix check`
    advises for an opset older than a release supports), verified and rolled back like a pass. ``max_memory`` (bytes, or
    ``"4G"``): candidate verification shapes whose run is estimated above it are not tried, and a
    run that grows onnxruntime's worker by more raises :class:`~graphfix.errors.OnnxruntimeDied`.
    ``requantize_symmetric`` / ``dequantize_dynamic``: the opt-in rewrites that change results
    (asymmetric Q/DQ made symmetric INT8; dynamic quantization made float), never run otherwise,
    each kept only within its documented bound, its deviation per output in the report
    (graphfix.pipeline.inexact, docs/verification.md).
    ``timeout``: seconds one onnxruntime step may take (graphfix.runtime.worker.DEFAULT_TIMEOUT
    when None).

    A wrong type raises GraphfixError in one line naming the argument and what it takes (the
    list below). Bad settings, paths or inputs raise GraphfixError before any work; onnxruntime
    crashing or outlasting ``timeout`` raises :class:`~graphfix.errors.OnnxruntimeDied` (a BaseException).
    """
    options.check_arguments(locals(), Pass)  # the first statement: locals() holds the arguments alone
    options.check_settings(passes=passes, iterations=iterations, seed=seed, atol=atol, rtol=rtol, val_range=val_range,
                           max_memory=max_memory)
    for option, given in (("--input-shapes", input_shapes), ("--fix-shapes", fix_shapes), ("--trt-*-shapes", list(profile_shapes))):
        options.check_dims(option, [s for s in ([given] if isinstance(given, dict) else list(given or []))])
    if timeout is not None:
        runtime_worker.check_timeout(timeout)
    options.check_convert_opset(convert_opset)
    source = None if isinstance(model, onnx.ModelProto) else str(model)
    inputs_file = None if inputs is None or isinstance(inputs, list | tuple) else str(inputs)
    paths.plan_fix(source, output, load_inputs=inputs_file)
    if verify or simplify:  # the worker imports onnxruntime while this process loads the model
        runtime_worker.start()
    else:
        load_checks.start_early(source)
    if progress is not None:
        progress("loading the model")
    # onnx.checker at load, or (a big graph) in the worker beside the load and the import, when
    # nothing else needs the worker before the import (onnxsim and the --fix-shapes run do)
    pending = load_checks.LoadChecks("<model>" if source is None else str(Path(source)), offload=not (simplify or fix_shapes))
    try:
        if isinstance(model, onnx.ModelProto):
            model = dims_mod.owned(model)
            accepted = check_graph(model, pending.where, checker=False, early=pending.submit)
        else:
            model, accepted = load_working(model, checker=False, early=pending.submit)
        checks = pending.loaded(model)
    except BaseException:
        pending.cancel()
        raise
    try:
        frozen = set_inputs_mod.values(model, set_inputs or {}, source)
        inputs = _check_inputs(model, inputs, inputs_file, verify, [*_shape_sets(input_shapes), *_shape_sets(fix_shapes)],
                               iterations, source)
        settings = settings_mod.Settings(
            passes=passes if isinstance(passes, str) else tuple(passes), skip=pass_names(skip), trt=trt,
            force=pass_names(force), verify=verify, verify_each=verify_each, strict=strict, atol=atol, rtol=rtol, seed=seed,
            iterations=iterations, input_shapes=_shape_sets(input_shapes),
            profile_shapes=_shape_sets(list(profile_shapes)), val_range=dict(val_range or {}), feeds=inputs,
            fix_shapes={k: tuple(int(d) for d in v) for k, v in (fix_shapes or {}).items()}, set_inputs=frozen,
            simplify=simplify, convert_opset=convert_opset,
            requantize_symmetric=bool(requantize_symmetric), dequantize_dynamic=bool(dequantize_dynamic),
            max_memory=options.parse_memory(max_memory),
            base_dir=None if source is None else str(Path(source).resolve().parent),
        )
        with runtime_worker.time_budget(timeout), runtime_worker.memory_budget(settings.max_memory):
            outcome = run_mod.run(model, settings, source, None if output is None else str(output), progress, checks)
    except BaseException as exc:
        if isinstance(exc, OnnxruntimeDied):
            exc.path = exc.path or source
        if checks is not None:
            checks.after_failure(exc)  # load_model's order: the checker's complaint first
        raise
    outcome.base_dir = settings.base_dir
    if accepted.declared:
        outcome.fixed = _with_declarations(outcome.fixed, accepted.declared)
    outcome.report.notes[:0] = accepted.notes
    _describe_inputs(outcome.report, model, outcome.feeds, loaded=inputs is not None)
    result = FixResult(outcome.report, outcome)
    if output is not None:
        with transaction_mod.transaction():
            save_model(outcome.fixed, output, settings.base_dir)
    return result


def _takes(function) -> str:
    """What each argument of ``function`` takes and its default, for its docstring: the words of
    graphfix.settings.checks.ARGUMENTS, which its refusals and docs/cli.md's table use, so that
    the three cannot drift apart."""
    lines = ["", "", "What each argument takes (default in brackets):", ""]
    for name, parameter in inspect.signature(function).parameters.items():
        if name == "self":
            continue
        default = "required" if parameter.default is inspect.Parameter.empty else repr(parameter.default)
        lines.append(f"- ``{name}`` [{default}]: {options.ARGUMENTS[name][1]}")
    return "\n".join(lines) + "\n"


for _function in (fix, FixResult.save, FixResult.save_report):
    _function.__doc__ = inspect.cleandoc(_function.__doc__ or "") + _takes(_function)


def _with_declarations(fixed: onnx.ModelProto | Assembled, declared: dims_mod.DeclaredDims) -> onnx.ModelProto | Assembled:
    """The fixed model with the dims of -1 or 0 the input declared (graphfix worked on them as
    dynamic dims): the model's interface is the user's (:mod:`graphfix.onnxio.dims`)."""
    if isinstance(fixed, Assembled):
        dims_mod.restore(fixed.stub, declared)
        return Assembled(fixed.stub, fixed.initializers)  # not a whole model built before
    dims_mod.restore(fixed, declared)
    return fixed


def _describe_inputs(rep: Report, model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], loaded: bool) -> None:
    """The report's ``inputs``: dtype and shape of each graph input as verification fed it (as
    declared when nothing was fed: a symbolic dim is its name); loaded inputs also list their
    shapes under ``shapes``, as the shape search does for the shapes it chose."""
    initializers = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        if feeds and vi.name in feeds[0]:
            value = feeds[0][vi.name]
            rep.inputs[vi.name] = {"dtype": str(value.dtype), "shape": list(value.shape)}
            continue
        tt = vi.type.tensor_type
        try:
            dtype = str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)))
        except (KeyError, TypeError, ValueError):
            dtype = onnx.TensorProto.DataType.Name(tt.elem_type).lower() if tt.elem_type in onnx.TensorProto.DataType.values() else "?"
        dims = [d.dim_value if d.HasField("dim_value") else proto_text(d.dim_param) or None for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        rep.inputs[vi.name] = {"dtype": dtype, "shape": dims}
    if loaded and feeds and not rep.shapes.get("shapes"):
        shapes = [{k: list(v.shape) for k, v in feed.items()} for feed in feeds]
        rep.shapes["shapes"] = [s for k, s in enumerate(shapes) if s not in shapes[:k]]


def _check_inputs(model: onnx.ModelProto, inputs, inputs_file: str | None, verify: bool,
                  input_shapes, iterations: int, where: str | None) -> list[dict[str, np.ndarray]] | None:
    """What verification will feed: checked loaded inputs, or a budget for random ones."""
    if verify:
        options.check_verifiable(model, where)
    if inputs is None:
        if verify:
            for shapes in _shape_sets(input_shapes) or [{}]:
                options.check_feed_budget(model, shapes, iterations, where)
        return None
    if inputs_file is not None:

        inputs = load_inputs(inputs_file, model)
    options.check_feeds(model, inputs, inputs_file)
    return list(inputs)
