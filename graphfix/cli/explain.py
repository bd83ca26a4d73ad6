"""``graphfix explain trt_build.log [--model model.onnx]``: the failing node, why, and the fix."""

from __future__ import annotations

import argparse
import json
import os
import stat

import onnx

from graphfix import passes
from graphfix.analysis.fold import Folder
from graphfix.check.errors import GENERIC, ErrorMatch, match_log
from graphfix.check.restrictions import broken
from graphfix.errors import GraphfixError, first_line
from graphfix.graph import Builder, to_graph
from graphfix.onnxio.load import load_model
from graphfix.onnxio.paths import MAX_LOG_BYTES, check_readable
from graphfix.passes.base import Context


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("log", help="TensorRT / trtexec / polygraphy output ('-' for standard input)")
    p.add_argument("--model", help="the ONNX model that was built: locate the node and confirm the pattern")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    text = _read(args.log)
    matches = match_log(text)
    model = load_model(args.model) if args.model else None
    elsewhere = [m for m in matches if m.id in GENERIC and not _in_model(model, m)] if model is not None else []
    matches = [m for m in matches if m not in elsewhere]
    located = locate(model, matches) if model is not None else {}
    if args.json:
        print(json.dumps([{**m.as_dict(), "model": located.get(id(m))} for m in matches], indent=2))
        return 0 if matches else 1
    if not matches:
        if elsewhere:
            ops = ", ".join(dict.fromkeys(m.op for m in elsewhere))
            print(f"{args.log}: the log's plugin errors name {ops}, which {args.model} does not have (a log of another model?)")
        else:
            print(f"{args.log}: no known TensorRT error found (graphfix knows the messages in graphfix/trt/data/errors.json)")
        return 1
    for k, m in enumerate(matches):
        head = "error" if k == 0 else "also"
        where = f"node {m.node} ({m.op})" if m.node else f"op {m.op}" + (f" writing {m.output!r}" if m.output else "")
        print(f"{head}: {m.id}: {where}")
        print(f"  log:   {m.line}")
        print(f"  cause: {m.cause}")
        print(f"  fix:   {_fix_line(m)}")
        if id(m) in located:
            print(f"  model: {located[id(m)]}")
    return 0


def _fix_line(m: ErrorMatch) -> str:
    if len(m.fix_passes) > 1:  # which one applies depends on the model: auto runs each where it sees its pattern
        return (f"graphfix IN OUT --passes auto ({' or '.join(m.fix_passes)}, where its pattern is found; --model says "
                f"which); where none is: {m.fix}")
    return f"graphfix IN OUT --passes {m.fix_pass}" if m.fix_pass else m.fix


def _read(path: str) -> str:
    """The log (a file, a pipe, or '-' for stdin), at most MAX_LOG_BYTES.

    A pipe is read, not refused (``graphfix explain <(trtexec ...)``, a named FIFO with the build
    writing to it), but only while something writes to it: a FIFO with no writer is refused at
    once instead of waiting forever for one."""

    if path == "-":
        import sys

        text = sys.stdin.read(MAX_LOG_BYTES + 1)
    else:
        check_readable(path, "log", allow_pipe=True)
        try:
            data = _read_bytes(path, MAX_LOG_BYTES + 1)
        except OSError as exc:
            raise GraphfixError(f"cannot read log ({first_line(exc)})", path) from exc
        text = data.decode("utf-8", errors="replace")
    if len(text) > MAX_LOG_BYTES:
        raise GraphfixError(f"log is larger than {MAX_LOG_BYTES >> 20} MiB; pass the part with the errors (e.g. grep -B5 -A5 ERROR)", path)
    return text


def _read_bytes(path: str, limit: int) -> bytes:
    """Up to ``limit`` bytes. Opened without blocking: on a FIFO that has no writer the open
    returns and the first read says end-of-file (a writer that is there but silent: EAGAIN)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb", buffering=0) as fh:
        first = b""
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            try:
                first = os.read(fd, min(limit, 1 << 16))
            except BlockingIOError:
                pass  # a writer is there and has not written yet
            else:
                if not first:
                    raise GraphfixError("a FIFO with no writer: start the program that writes the log first, "
                                        "or pipe the log into 'graphfix explain -'", path)
        os.set_blocking(fd, True)
        chunks, size = [first], len(first)
        while size < limit:
            chunk = fh.read(min(limit - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)


def _in_model(model: onnx.ModelProto, m: ErrorMatch) -> bool:
    """Whether the op (or node) a generic plugin error names is in the model: a catch-all
    explanation of an op the model lacks explains someone else's log."""
    return any(n.op_type == m.op or (m.node and n.name == m.node) for n in model.graph.node)


def locate(model: onnx.ModelProto, matches: list[ErrorMatch]) -> dict[int, str]:
    """Per match: where the node is in the model (by name, else by the output TensorRT 8.x names,
    else by op) and whether the fixing pass sees its pattern there."""
    graph = to_graph(model)
    ctx = Context(graph, Builder(graph), Folder(graph))
    by_name = {n.name: n for n in graph.nodes}
    by_output = {t.name: n for n in graph.nodes for t in n.outputs}
    found: dict[int, str] = {}
    for m in matches:
        exact = by_name.get(m.node) if m.node else by_output.get(m.output) if m.output else None
        candidates = [exact] if exact is not None else [n for n in graph.nodes if n.op == m.op]
        if not candidates:
            found[id(m)] = f"no node named {m.node!r} or of op {m.op} in the model" if m.node else f"no {m.op} node in the model"
            continue
        fixers = [passes.get(name) for name in m.fix_passes or ((m.fix_pass,) if m.fix_pass else ())]
        fixer, confirmed = next(((f, c) for f in fixers if (c := [n for n in candidates if f.match(n, ctx)])), (None, []))
        names = ", ".join(n.name or n.op for n in (confirmed or candidates)[:5])
        if confirmed:
            found[id(m)] = f"pattern confirmed at {names}: {fixer.name} rewrites it"
            continue
        restricted = next(((n, r, text) for n in candidates for r, text in broken(n, ctx) if r.error == m.id), None)
        if restricted is not None:  # a parser rule no pass rewrites: what check says, and the change to make
            n, r, text = restricted
            found[id(m)] = f"found {n.name or n.op}: {text}; no pass rewrites it ({r.name}): {r.upstream}"
        elif fixers:
            found[id(m)] = f"found {names}, but {' / '.join(f.name for f in fixers)} sees nothing to rewrite there"
        else:
            found[id(m)] = f"found {names}"
    return found
