"""``graphfix fix IN OUT``: the pass pipeline, verified pass by pass, then an atomic write."""

from __future__ import annotations

import argparse
import gc
import sys
import threading
import time
from pathlib import Path

from graphfix import engine as trt_engine
from graphfix.api import FixResult, fix, write_report_files
from graphfix.check.findings import data_source_lines, finding_groups, from_data
from graphfix.cli.common import discard_stdout, exit_code
from graphfix.engine import command_lines, parse_profile_shapes
from graphfix.errors import GraphfixError, OnnxruntimeDied, first_line, visible
from graphfix.fs import signals
from graphfix.fs import transaction as transaction_mod
from graphfix.onnxio import paths
from graphfix.onnxio.proto import Assembled
from graphfix.onnxio.save import save_model
from graphfix.pipeline import profile as profile_mod
from graphfix.report import model as model_mod
from graphfix.report import summary as summary_mod
from graphfix.report.model import ERROR, ROLLED_BACK
from graphfix.runtime import worker as runtime_worker
from graphfix.settings import checks as options
from graphfix.settings.syntax import parse_input_shapes, parse_set_inputs, parse_shape_sets, parse_val_ranges
from graphfix.trt import support as trt_support
from graphfix.verify import inputs as inputs_mod
from graphfix.verify import sessions


def _shape_item(text: str) -> str:
    """One ``name:dims`` value, checked as argparse reads it: a path swallowed by a multi-value
    ``--input-shapes`` gets told where the paths go."""
    try:
        parse_input_shapes([text])
    except GraphfixError as exc:
        hint = " (give IN and OUT before the shape options)" if text.endswith(".onnx") else ""
        raise argparse.ArgumentTypeError(f"{exc}{hint}") from None
    return text


class _Shapes(argparse.Action):
    """Shapes in trtexec's form (``a:1x16,b:1x16``) or polygraphy's (``a:[1,16] b:[1,16]``); each
    occurrence is kept as one comma-joined item, since an occurrence that names an input again
    starts another shape set."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ARG002 - argparse's signature
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), ",".join(values)])


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="IN OUT",
                   help="the ONNX model to fix (never modified) and where to write the fixed one (atomically); "
                        "with --out-dir, every path is a model to fix")
    p.add_argument("--out-dir", metavar="DIR", help="fix several models, each written to DIR under its own file name")
    g = p.add_argument_group("passes")
    g.add_argument("--passes", default="all", help="'all' (default), 'auto' (with --trt), or a comma-separated list; run in pipeline order")
    g.add_argument("--skip", action="append", default=[], metavar="PASS", help="leave out a pass (repeatable, or comma-separated)")
    g.add_argument("--trt", metavar="VERSION", help="target TensorRT release (e.g. 8.6, 10.1): passes rewrite only what it rejects")
    g.add_argument("--force", action="append", default=[], metavar="PASS", help="make PASS rewrite even patterns the target accepts")
    g.add_argument("--fix-shapes", action=_Shapes, nargs="+", type=_shape_item, metavar="NAME:1x3x320x320",
                   help="freeze these input dims in the written model and fold the shape arithmetic that becomes "
                        "constant (computed TopK K, Resize sizes, pads); verified against the original at those shapes")
    g.add_argument("--set-input", action="append", metavar="NAME=VALUE",
                   help="freeze an input to a value (a number, true/false, or a list like [1,2]; repeatable): what "
                        "follows is folded and the Ifs it decides inlined, verified against the original fed that value")
    g.add_argument("--simplify", action="store_true",
                   help="run onnx-simplifier first (graphfix[simplify]), verified and rolled back like a pass")
    g.add_argument("--convert-opset", type=int, metavar="N",
                   help="convert the model to opset N first (onnx.version_converter), verified and rolled back like a "
                        "pass; `graphfix check` advises it for opsets older than a release supports")
    q = p.add_argument_group("opt-in rewrites that change results (never run by --passes all/auto; docs/cli.md)")
    q.add_argument("--requantize-symmetric", action="store_true",
                   help="asymmetric INT8/UINT8 Q/DQ as symmetric INT8 (zero point 0) covering the same range; NOT exact: "
                        "kept within 4 quantization steps per output, the report gives each output's deviation")
    q.add_argument("--dequantize-dynamic", action="store_true",
                   help="dynamic quantization (DynamicQuantizeLinear + MatMulInteger/ConvInteger, DynamicQuantizeLSTM) as "
                        "float ops on the dequantized weights; NOT exact, and the model is then no longer quantized")
    v = p.add_argument_group("verification (onnxruntime, before vs after every pass)")
    v.add_argument("--no-verify", action="store_true", help="skip onnxruntime verification (passes are then kept unverified)")
    v.add_argument("--verify-each", action="store_true", help="check pass by pass (one session per changed pass; for debugging)")
    v.add_argument("--strict", action="store_true", help="exit 1 (writing nothing) instead of rolling back a pass")
    v.add_argument("--atol", type=float, help="absolute tolerance, exactly (default: 1e-5 widened to each region's "
                   "rounding and, end to end, to the model's own noise floor)")
    v.add_argument("--rtol", type=float, help="relative tolerance, exactly (default: as --atol)")
    v.add_argument("--seed", type=int, default=1, help="seed for the random inputs (default 1)")
    v.add_argument("--iterations", type=int, default=1, help="how many random input sets (default 1)")
    v.add_argument("--input-shapes", action=_Shapes, nargs="+", type=_shape_item, metavar="NAME:1x3x224x224",
                   help="shapes for dynamic inputs (trtexec a:1x16,b:1x16 or polygraphy a:[1,16] b:[1,16]); "
                        "repeat to verify at several shapes (default: found by trying)")
    v.add_argument("--val-range", action="append", metavar="NAME:[LO,HI]", help="value range of an input (e.g. indices)")
    v.add_argument("--load-inputs", metavar="FILE", help="inputs from .npz or polygraphy JSON (polygraphy run --save-inputs)")
    v.add_argument("--max-memory", metavar="SIZE", default="4G",
                   help="verification shapes are searched for only where one onnxruntime run is estimated below this, "
                        "and a run that needs more stops graphfix (bytes, or K/M/G: 4G, the default, 512M); the report "
                        "says which budget chose the shapes")
    v.add_argument("--timeout", type=float, metavar="SECONDS",
                   help=f"stop onnxruntime when one step (making a session, one run) takes longer than this "
                        f"(default {runtime_worker.DEFAULT_TIMEOUT:g}, at most {runtime_worker.MAX_TIMEOUT:g}); "
                        "the run then ends with exit 2")
    t = p.add_argument_group("TensorRT engine (needs graphfix[trt] and a GPU)")
    t.add_argument("--build", metavar="ENGINE", help="build the fixed model with polygraphy and compare TensorRT with onnxruntime")
    for which in ("min", "opt", "max"):
        t.add_argument(f"--trt-{which}-shapes", action=_Shapes, nargs="+", type=_shape_item, metavar="NAME:1x3x224x224",
                       help=f"optimization profile {which}imum (trtexec or polygraphy syntax, as --input-shapes)")
    t.add_argument("--fp16", action="store_true", help="build with FP16 enabled")
    p.add_argument("--external-data", metavar="NAME",
                   help="write the weights to this file beside the output (default for models with external data or "
                        "over 2 GiB: OUT.onnx.data; smaller models stay one file unless this is given)")
    r = p.add_argument_group("reports")
    r.add_argument("--report", action="append", default=[], metavar="FILE", help="write the report: .json (plus polygraphy inputs/outputs files), .md or .html (one self-contained page)")
    r.add_argument("--quiet", action="store_true", help="don't print the table")


def _profile_sets(args: argparse.Namespace) -> list[dict[str, tuple[int, ...]]]:
    """The TensorRT profile's min/opt/max shapes, verified too where onnxruntime runs them."""
    return [parse_input_shapes(flag, f"--trt-{which}-shapes")
            for which, flag in (("min", args.trt_min_shapes), ("opt", args.trt_opt_shapes), ("max", args.trt_max_shapes)) if flag]


class _Progress:
    """What the run is doing, on stderr (nothing with --quiet). On a terminal a live status line
    (tqdm) whose elapsed time keeps ticking while one long onnxruntime call runs (a thread
    refreshes it); elsewhere (CI, pipes) one line per finished phase with its time, so a log shows
    where a long run went. A step ``"phase: detail"`` belongs to ``phase`` (details such as the
    pass name or the regions compared are shown live only)."""

    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self.phase: str | None = None
        self.started = 0.0
        self.bar = None
        self.stop = threading.Event()
        if self.live:
            from tqdm import tqdm

            self.bar = tqdm(file=sys.stderr, bar_format="graphfix: {desc} [{elapsed}]", leave=False)
            self.ticker = threading.Thread(target=self._tick, daemon=True)
            self.ticker.start()

    def _tick(self) -> None:
        while not self.stop.wait(0.5):
            self.bar.refresh()

    def __call__(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(what)
            self.bar.update()
            return
        phase = what.split(": ", 1)[0]
        if phase != self.phase:
            self._end_phase()
            self.phase, self.started = phase, time.perf_counter()

    def _end_phase(self) -> None:
        if self.phase is not None:
            print(f"graphfix: {self.phase} ... {time.perf_counter() - self.started:.1f}s", file=sys.stderr, flush=True)
        self.phase = None

    def close(self, finished: bool) -> None:
        """``finished``: the last phase's line too (a failed run's error says the rest)."""
        if self.bar is not None:
            self.stop.set()
            self.ticker.join()
            self.bar.close()
        elif finished:
            self._end_phase()


def run(args: argparse.Namespace) -> int:
    """``IN OUT``, or several inputs with ``--out-dir`` (each fixed on its own, as if run alone)."""
    if args.out_dir is None:
        if len(args.paths) != 2:
            raise GraphfixError(f"expected IN OUT, got {len(args.paths)} path(s) (several models: --out-dir DIR)")
        args.input, args.output = args.paths
        try:
            return fix_one(args)
        finally:
            gc.enable()  # for whoever runs on in this process (tests, the API's users)
    return _fix_many(args)


#: Which exit code a batch reports when its models ended differently: a bug first, then bad input,
#: --strict failures, models the target still rejects, and 0 only when every model was fixed.
_BATCH_PRIORITY = (3, 2, 1, 4, 0)


def _fix_many(args: argparse.Namespace) -> int:
    """Every model in turn into --out-dir (a team fixing a folder of exports in CI); a model that is
    refused (onnxruntime crashing or outlasting --timeout on it included) is said in one line and
    the others go on; --report and --external-data names get the model's name in front. Each model
    is a transaction: SIGINT/SIGTERM end the batch after at most the model in flight (its files
    whole, or absent when the signal came before its commit)."""

    if args.build:
        raise GraphfixError("--build builds one engine: give one model (IN OUT) to build it")
    out_dir = Path(args.out_dir)
    if not out_dir.is_dir():
        raise GraphfixError("--out-dir: not a directory" if out_dir.exists() else "--out-dir: no such directory", args.out_dir)
    paths.check_batch(args.paths, out_dir, args.report, sidecar_files=not args.no_verify)
    reports, codes = list(args.report), []
    for source in args.paths:
        one = argparse.Namespace(**vars(args))
        output, named = paths.batch_names(source, out_dir, reports)
        one.input, one.output, one.report = source, str(output), [str(r) for r in named]
        if args.external_data is not None:  # one data file per model, named like its reports
            data = Path(args.external_data)
            one.external_data = str(data.with_name(f"{Path(source).stem}.{data.name}"))
        try:
            code = fix_one(one)
        except (GraphfixError, OnnxruntimeDied) as exc:  # the model is refused; the others go on
            code = exit_code(exc, False)
        finally:
            gc.enable()  # the last model's graph goes before the next one's comes
        codes.append(code)
        signals.release_signals()  # a signal during this model's commit ends the batch here
    done = sum(c in (0, 4) for c in codes)
    print(f"graphfix: {done} of {len(codes)} model(s) written to {out_dir} ({codes.count(4)} still rejected by the target, "
          f"{len(codes) - done} not written)", file=sys.stderr)
    return next(c for c in _BATCH_PRIORITY if c in codes)


def fix_one(args: argparse.Namespace) -> int:
    """Everything that can be refused is refused first (options, then every path); the files are
    written together at the end, all or none (graphfix.fs.transaction.Transaction)."""
    parse_input_shapes(args.input_shapes)  # syntax first
    set_inputs = parse_set_inputs(args.set_input)
    val_range = parse_val_ranges(args.val_range)
    options.check_settings(passes=args.passes, iterations=args.iterations, seed=args.seed, atol=args.atol, rtol=args.rtol,
                           val_range=val_range, max_memory=args.max_memory)
    if args.timeout is not None:
        runtime_worker.check_timeout(args.timeout)
    if args.trt is not None:
        trt_support.resolve(args.trt)  # a typo ('86') is refused before any work
    profile = parse_profile_shapes(args.trt_min_shapes, args.trt_opt_shapes, args.trt_max_shapes)
    if args.build and not trt_engine.tensorrt_available():
        raise GraphfixError(f"--build: {trt_engine.MISSING}")
    plan = paths.plan_fix(args.input, args.output, args.report, load_inputs=args.load_inputs, engine=args.build,
                          external_data=args.external_data, sidecar_files=not args.no_verify)
    status = None if args.quiet else _Progress()
    try:
        result = fix(
            args.input, args.passes, skip=args.skip, trt=args.trt, force=args.force,
            verify=not args.no_verify, strict=args.strict, atol=args.atol, rtol=args.rtol, seed=args.seed,
            iterations=args.iterations, input_shapes=parse_shape_sets(args.input_shapes), verify_each=args.verify_each,
            profile_shapes=_profile_sets(args), progress=status,
            val_range=val_range, inputs=args.load_inputs, fix_shapes=parse_input_shapes(args.fix_shapes, "--fix-shapes"),
            set_inputs=set_inputs, simplify=args.simplify, convert_opset=args.convert_opset, max_memory=args.max_memory,
            timeout=args.timeout,
            requantize_symmetric=args.requantize_symmetric, dequantize_dynamic=args.dequantize_dynamic,
        )
    except BaseException:
        if status is not None:
            status.close(finished=False)
        raise
    if status is not None:
        status.close(finished=True)
    # the process writes its files and exits (without freeing the graph): a collection now would
    # scan the whole graph only to free it (0.09 s on bench/scale.py's 100k nodes); a batch turns
    # the collector back on between models
    gc.disable()
    result.report.output = args.output
    if args.build or (args.trt and not result.report.blocking_left):  # no build line for a model it rejects
        engine_path = args.build or str(Path(args.output).with_suffix(".engine"))
        printed = _printed_profile(result, args, profile)
        profile = printed.shapes  # the engine built is the one printed
        result.report.engine = {"commands": command_lines(args.output, engine_path, profile, args.fp16,
                                                          _reference_files(result, args)),
                                "profile": printed.as_dict()}
    signals.reraise_swallowed_signal()
    with transaction_mod.Transaction(lock=plan.write_paths()) as tx:
        save_model(result.outcome.fixed, args.output, result.outcome.base_dir, args.external_data)
        if args.build:
            tx.commit()  # TensorRT parses the model from disk; a failure below still removes it
            result.report.engine.update(_build(result, args, profile, tx.reserve(args.build, "engine").temp))
        for path in args.report:
            write_report_files(result, path)
        signals.reraise_swallowed_signal()
        signals.hold_signals()  # from the renames on, the run finishes cleanly
    _finish(result, args)
    return EXIT_BLOCKED if result.report.blocking_left else 0


#: The written model is still rejected by the ``--trt`` target (the summary says why and what to do).
EXIT_BLOCKED = 4


def _printed_profile(result: FixResult, args: argparse.Namespace, given: dict) -> profile_mod.PrintedProfile:
    """The profile of the printed command lines (graphfix.pipeline.profile): the user's
    --trt-*-shapes, the dims the user gave otherwise, and for the rest the shapes verification ran
    (or the given --input-shapes without verification), marked as guessed, tied where dims share
    a name or are one batch."""
    shapes = result.report.shapes or {}
    user_sets = parse_shape_sets(args.input_shapes)
    sets = shapes.get("shapes") or [{k: list(v) for k, v in s.items()} for s in user_sets]
    stub = Assembled.of(result.outcome.fixed).stub
    given_inputs = {n for s in user_sets for n in s}
    if args.load_inputs:  # the user's own data: every input as given
        given_inputs |= {vi.name for vi in stub.graph.input}
    return profile_mod.build(stub, sets, given, given_inputs, shapes.get("guessed"), verified=result.report.sessions > 0)


def _reference_files(result: FixResult, args: argparse.Namespace) -> tuple[str, str] | None:
    """The polygraphy inputs/outputs files of the first JSON report, when one is written."""
    json_reports = [r for r in args.report if paths.sidecars(r)]
    if not json_reports or result.outcome.baseline is None:
        return None
    inputs, outputs = paths.sidecars(json_reports[0])
    return str(inputs), str(outputs)


def _build(result: FixResult, args: argparse.Namespace, profile, temp: Path) -> dict:

    outcome = result.outcome
    shapes = result.report.shapes.get("shapes") or [{}]
    feeds = outcome.feeds or inputs_mod.make_inputs(result.model, {k: tuple(v) for k, v in shapes[0].items()}, seed=args.seed)
    reference = outcome.final or sessions.run(result.model, feeds, "onnxrt")
    tol = trt_engine.engine_tolerance(args.fp16)
    try:
        built = trt_engine.build_and_compare(args.output, str(temp), feeds, reference, profile, args.fp16, atol=tol, rtol=tol)
    except GraphfixError:
        raise
    except Exception as exc:  # noqa: BLE001 - TensorRT/polygraphy raise many types
        raise GraphfixError(f"TensorRT engine build failed ({first_line(exc)}); nothing was written: "
                            "rerun without --build to keep the fixed model", args.build) from exc
    return {**built, "engine": args.build}


def _finish(result: FixResult, args: argparse.Namespace) -> None:
    """Print what was done (the files are already in place)."""
    try:
        _print(result, args)
    except BrokenPipeError:  # `graphfix ... | head`: the files are written, the run succeeded

        discard_stdout()


def blocked_summary(report: model_mod.Report) -> list[str]:
    """Why TensorRT will still reject the written model, and what the user can do (exit 4)."""
    left = report.blocking_left
    if not left:
        return []
    lines = [f"graphfix: TensorRT {report.trt['after']['version_used']} will still reject {report.output}: "
             f"{len(left)} blocking finding(s) left (exit 4)"]
    for rec in report.passes:
        if rec.verdict in (ROLLED_BACK, ERROR) or rec.rolled_back_nodes:
            lines.append(f"  pass {rec.name}: {rec.reason}")
    shapes = report.shapes or {}
    differed = any("outputs differ" in rec.reason for rec in report.passes)
    if differed and any(shapes.get("shapes") or [{}]) and "given" not in shapes.get("reason", ""):
        used = " and ".join(",".join(f"{k}:{'x'.join(map(str, v))}" for k, v in s.items()) for s in shapes["shapes"])
        lines.append(f"  verified at {used} ({shapes.get('reason', '')}): if these are not shapes the model is "
                     "meant for, give real ones with --input-shapes NAME:1x3x224x224 (and --val-range for indices)")
    without = [f for f in left if not f.get("fix_pass")]
    if without:
        lines.append(f"  {len(without)} finding(s) have no graphfix rewrite; `graphfix check {report.output} --trt "
                     f"{report.trt['version']}` says what to change upstream for each")
        options = sorted({f["opt_in"] for f in without if f.get("opt_in")})
        if options:
            lines.append(f"  {sum(bool(f.get('opt_in')) for f in without)} of them clear with an opt-in rewrite that changes "
                         f"results: {', '.join(options)} (not exact; docs/cli.md says what it costs)")
    return lines


def _print(result: FixResult, args: argparse.Namespace) -> None:
    if not args.quiet:
        print(summary_mod.table(result.report))
        if result.report.trt:
            before, after = result.report.trt["before"], result.report.trt["after"]
            left = [f for f in after["findings"] if f["severity"] == "blocking"]
            print(f"TensorRT {after['version_used']}: {sum(f['severity'] == 'blocking' for f in before['findings'])} blocking finding(s) before, {len(left)} after")
            for same in finding_groups(left):
                f = same[0]
                if from_data(f):  # one data source, a few lines
                    head, more = data_source_lines(same, "    ")
                    print("\n".join(visible(line) for line in [f"  {head}", *more]))
                    continue
                like = summary_mod.in_parens(summary_mod.more_like(same))
                print(visible(f"  {f['node'] or '(model)'} ({f['op'] or '-'}): {f['message']} -> {f['remedy']}{like}"))
        engine = result.report.engine or {}
        for tool, line in engine.get("commands", {}).items():
            print(visible(f"{tool}: {line}"))
        if engine.get("profile", {}).get("note"):
            print(visible(engine["profile"]["note"]))
        if "passed" in engine:
            print(f"TensorRT vs onnxruntime: {'match' if engine['passed'] else 'MISMATCH'} (max abs {engine['max_abs']:.3g}), engine {engine['engine']}")
        print(f"wrote {args.output}", file=sys.stderr)
    for line in blocked_summary(result.report):  # with --quiet too: the exit code needs its reason
        print(visible(line), file=sys.stderr)
