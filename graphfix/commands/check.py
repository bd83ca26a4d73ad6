"""``graphfix check model.onnx --trt 8.6``: what that parser release will reject, and the fix."""

from __future__ import annotations

import argparse
import json

from graphfix.model_io import load_model
from graphfix.report import grouped
from graphfix.trt.check import BLOCKING, check_model
from graphfix.trt.support import resolve


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model to check")
    p.add_argument("--trt", required=True, metavar="VERSION", help="TensorRT release, e.g. 7.2, 8.6, 10.1 (an undocumented one uses the nearest documented below)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    resolve(args.trt)  # a version typo is refused before the model is read
    report = check_model(load_model(args.model), args.trt)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 1 if report.blocking else 0
    print(render(report, args.model))
    return 1 if report.blocking else 0


def render(report, model: str) -> str:
    lines = [f"{model}: TensorRT {report.version_used} parser, opset {report.opset}"]
    if report.note:
        lines.append(f"note: {report.note}")
    if not report.findings:
        lines.append("no findings: the parser should accept every node")
        return "\n".join(lines)
    for f, like in grouped(report.as_dict()["findings"], ("severity", "op", "message", "error_text", "remedy")):
        where = f"{f['node']} ({f['op']})" if f["node"] else "(model)"
        lines.append(f"{f['severity'].upper():8}  {where}: {f['message']}")
        if like:
            lines.append(f"          {like}; --json lists every node")
        if f["path"]:
            lines.append(f"          path: {' -> '.join(f['path'])}")
        if f["error_text"]:
            lines.append(f"          TensorRT: {f['error_text']}")
        lines.append(f"          fix: {f['remedy']}")
    blocking = sum(f.severity == BLOCKING for f in report.findings)
    fixable = sum(f.severity == BLOCKING and f.fix_pass is not None for f in report.findings)
    lines.append(f"{blocking} blocking ({fixable} fixable by graphfix passes: graphfix IN OUT --passes auto --trt {report.requested}), "
                 f"{len(report.findings) - blocking} warning(s)")
    return "\n".join(lines)
