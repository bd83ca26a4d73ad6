"""``graphfix check model.onnx --trt 8.6``: what that parser release will reject, and the fix.

Several models (files or directories of ``.onnx``) or releases (``--trt 8.2,8.6,10.1``) make a
readiness matrix: per model and release *clean*, *fixable* (the passes that clear it, run without
verification) or *blocked* (what stays after fixing); the exit code tells CI whether anything is
blocked after fixing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from graphfix.api import fix
from graphfix.check.findings import BLOCKING, check_model, data_source_lines, finding_groups, from_data
from graphfix.cli.common import quiet_libraries
from graphfix.errors import GraphfixError, visible
from graphfix.onnxio.load import load_model, load_working
from graphfix.report.summary import more_like
from graphfix.report.text import MAX_TEXT, md_code, md_text
from graphfix.settings.checks import check_jobs
from graphfix.trt.support import resolve

CLEAN, FIXABLE, BLOCKED, ERROR = "clean", "fixable", "blocked", "error"
#: Passes a terminal cell names before "+N" (CSV, JSON and Markdown name every one).
SHOWN_PASSES = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="+", help="ONNX model(s) to check, or directories of them (searched recursively)")
    p.add_argument("--trt", required=True, metavar="VERSION[,VERSION...]",
                   help="TensorRT release(s), e.g. 8.6 or 8.2,8.6,10.1 (an undocumented one uses the nearest documented below)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="machine-readable output")
    out.add_argument("--csv", action="store_true", help="the readiness matrix as CSV")
    out.add_argument("--md", action="store_true", help="the readiness matrix as a Markdown table")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="check N models at a time, in separate processes")


def run(args: argparse.Namespace) -> int:
    versions = [v.strip() for v in args.trt.split(",") if v.strip()]
    if not versions:
        raise GraphfixError(f"--trt {args.trt!r} names no release")
    check_jobs(args.jobs)
    for v in versions:
        resolve(v)  # a version typo ('86') is refused before any model is read
    if len(args.model) == 1 and len(versions) == 1 and not Path(args.model[0]).is_dir() and not (args.csv or args.md):
        return _single(args.model[0], versions[0], args.json)
    rows = _rows(_models(args.model), versions, args.jobs)
    if args.json:
        print(json.dumps({"releases": versions, "models": rows}, indent=2))
    elif args.csv:
        print(to_csv(rows, versions), end="")
    else:
        print(to_markdown(rows, versions) if args.md else to_text(rows, versions))
    return exit_code(rows)


def _single(model: str, version: str, as_json: bool) -> int:
    """One model, one release: every finding, in full."""
    loaded, accepted = load_working(model)
    report = check_model(loaded, version)
    print(json.dumps({**report.as_dict(), "notes": accepted.notes}, indent=2) if as_json else render(report, model, accepted.notes))
    return 1 if report.blocking else 0


def _models(items: list[str]) -> list[str]:
    """Files as given, directories as their ``.onnx`` files (sorted, recursively)."""
    found: list[str] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            inside = sorted(str(p) for p in path.rglob("*.onnx") if p.is_file())
            if not inside:
                raise GraphfixError("directory holds no .onnx file", item)
            found += inside
        else:
            found.append(item)
    return list(dict.fromkeys(found))


def _rows(models: list[str], versions: list[str], jobs: int) -> list[dict[str, Any]]:
    if jobs == 1 or len(models) == 1:
        return [readiness(m, versions) for m in models]
    import multiprocessing

    # spawn: a forked child would inherit the parent's signal handlers and onnxruntime's threads
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(models)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_leave_signals_to_the_parent)
    try:
        futures = [pool.submit(readiness, m, versions) for m in models]
        return [f.result() for f in futures]
    except BaseException:
        _stop(pool)
        raise
    finally:
        pool.shutdown(wait=True)


def _leave_signals_to_the_parent() -> None:
    """A worker ignores SIGINT/SIGTERM: Ctrl-C and ``kill -TERM -PGID`` reach the whole process
    group, and a worker dying of them mid-task made the pool's own thread print a traceback; the
    parent gets the same signal, stops the workers (_stop) and exits 130/143."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor) -> None:
    """The workers killed and the pool shut down before the run ends on a signal or an error:
    its queues and their semaphores are released (with a worker left running, ``os._exit``
    left them to the resource tracker, which warned of leaked semaphores)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()
    pool.shutdown(wait=True)


def readiness(model_path: str, versions: list[str]) -> dict[str, Any]:
    """One model's row: per release clean, fixable (the passes ``--passes auto`` runs, without
    verification) or blocked (the blocking findings left after those passes); a model that cannot
    be read is one error for the whole row."""

    row: dict[str, Any] = {"model": model_path, "releases": {}}
    with quiet_libraries():
        try:
            model = load_model(model_path)
            for v in versions:
                before = check_model(model, v)
                if not before.blocking:
                    row["releases"][v] = {"status": CLEAN, "passes": [], "blocked": []}
                    continue
                report = fix(model, "auto", trt=v, verify=False).report
                left = [f for f in report.trt["after"]["findings"] if f["severity"] == BLOCKING]
                row["releases"][v] = {"status": BLOCKED if left else FIXABLE,
                                      "passes": [p.name for p in report.passes if p.rewritten],
                                      "blocked": [_why(same) for same in finding_groups(left)]}
        except GraphfixError as exc:
            row["error"] = str(exc)
    return row


def _why(same: list[dict[str, Any]]) -> str:
    f = same[0]
    if from_data(f):  # data-dependent sizes: one line per source
        head, _ = data_source_lines(same)
        ops = "+".join(dict.fromkeys(g["op"] for g in same))
        return f"{ops} {head}" + (f"; upstream: {f['upstream']}" if f.get("upstream") else "")
    where = f"{f['op']} {f['node']}" if f["node"] else "the model"
    change = f.get("upstream") or f.get("fix_step")  # what to do, where the message does not say it
    return f"{where}{f' (+{len(same) - 1} more)' if len(same) > 1 else ''}: {f['message']}" + (f"; fix: {change}" if change else "")


def exit_code(rows: list[dict[str, Any]]) -> int:
    """2 when a model could not be checked, 1 when a model stays blocked after fixing, else 0."""
    if any("error" in r for r in rows):
        return 2
    return 1 if any(c["status"] == BLOCKED for r in rows for c in r["releases"].values()) else 0


def cell(row: dict[str, Any], version: str, detail: bool = True) -> str:
    """One model x release: ``clean``, ``fixable: pass, pass``, ``blocked: why; why``."""
    if "error" in row:
        return f"{ERROR}: {row['error']}" if detail else ERROR
    c = row["releases"][version]
    if c["status"] == CLEAN:
        return CLEAN
    if c["status"] == FIXABLE:
        shown = c["passes"] if detail or len(c["passes"]) <= SHOWN_PASSES else [*c["passes"][:SHOWN_PASSES], f"+{len(c['passes']) - SHOWN_PASSES}"]
        return f"{FIXABLE}: {', '.join(shown)}"
    ops = ", ".join(dict.fromkeys(w.split(" ", 1)[0] for w in c["blocked"]))
    return f"{BLOCKED}: {'; '.join(c['blocked'])}" if detail else f"BLOCKED: {ops}"


def _lines(rows: list[dict[str, Any]], versions: list[str]) -> Iterator[list[str]]:
    yield ["model", *versions]
    for r in rows:
        yield [r["model"], *(cell(r, v, detail=False) for v in versions)]


def to_text(rows: list[dict[str, Any]], versions: list[str]) -> str:
    """Aligned columns (blocked cells name the ops), then why each blocked cell is blocked."""
    table = [[visible(c) for c in t] for t in _lines(rows, versions)]  # names are free text: escapes, not control codes
    widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in table]
    out.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"{r['model']}: {r['error']}" for r in rows if "error" in r]
    notes += [f"{r['model']} @ {v}: {why}" for r in rows if "error" not in r for v in versions
              for why in r["releases"][v]["blocked"]]
    blocked = sum(c["status"] == BLOCKED for r in rows if "error" not in r for c in r["releases"].values())
    out += ["", *map(visible, notes)] if notes else []
    out += ["", f"{len(rows)} model(s) x {len(versions)} release(s): {blocked} blocked after fixing"
            + (f", {len(rows) - sum('error' not in r for r in rows)} unreadable" if any("error" in r for r in rows) else "")]
    return "\n".join(out)


def to_csv(rows: list[dict[str, Any]], versions: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["model", *versions])
    writer.writerows([visible(r["model"]), *(visible(cell(r, v)) for v in versions)] for r in rows)
    return buf.getvalue()


def to_markdown(rows: list[dict[str, Any]], versions: list[str]) -> str:
    out = ["| model | " + " | ".join(map(md_text, versions)) + " |", "|---|" + "---|" * len(versions)]
    out += ["| " + " | ".join([md_code(r["model"], MAX_TEXT), *(md_text(cell(r, v)) for v in versions)]) + " |" for r in rows]
    return "\n".join(out)


def render(report, model: str, notes: list[str] | tuple[str, ...] = ()) -> str:
    """``notes``: what the load accepted that onnx's tools alone trip on (graphfix.onnxio.validate.Accepted)."""
    lines = [f"{model}: TensorRT {report.version_used} parser, opset {report.opset}"]
    if report.note:
        lines.append(f"note: {report.note}")
    lines += [f"note: {n}" for n in notes]
    if not report.findings:
        lines.append("no findings: the parser should accept every node")
        return "\n".join(map(visible, lines))
    for same in finding_groups(report.as_dict()["findings"]):
        f = same[0]
        if from_data(f):  # one source of data-dependent sizes
            head, more = data_source_lines(same)
            lines += [f"{f['severity'].upper():8}  {head}", *more]
            if f["error_text"]:
                lines.append(f"          TensorRT: {f['error_text']}")
            continue
        where = f"{f['node']} ({f['op']})" if f["node"] else "(model)"
        lines.append(f"{f['severity'].upper():8}  {where}: {f['message']}")
        like = more_like(same)
        if like:
            lines.append(f"          {like}; --json lists every node")
        if f["path"]:
            lines.append(f"          path: {' -> '.join(f['path'])}")
        if f["error_text"]:
            lines.append(f"          TensorRT: {f['error_text']}")
        lines.append(f"          fix: {f['remedy']}")
    lines = [visible(line) for line in lines]  # node names are free text: ESC, BEL, CR and newlines as escapes
    blocking = sum(f.severity == BLOCKING for f in report.findings)
    fixable = sum(f.severity == BLOCKING and f.fix_pass is not None for f in report.findings)
    fix = f"{fixable} fixable by graphfix passes: graphfix IN OUT --passes auto --trt {report.requested}" if fixable else "none fixable by graphfix passes"
    lines.append(f"{blocking} blocking" + (f" ({fix})" if blocking else "") + f", {len(report.findings) - blocking} warning(s)")
    return "\n".join(lines)
