"""Loading, validating and atomically saving ONNX models.

onnx >= 1.23 writes IR version 14 while onnxruntime 1.31 reads at most 13 (1.32 reads 14), so
every model that leaves graphfix (to disk or to an onnxruntime session) goes through
:func:`runtime_compatible`, which asks the installed onnxruntime what it reads.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from graphfix.errors import GraphfixError

#: Default-domain opsets graphfix rewrites (onnxruntime's CPU kernels start at 7; TensorRT parsers at 9).
MIN_OPSET = 7
#: 2 GiB protobuf limit: larger models are written with external data.
_PROTO_LIMIT = 2**31 - 1


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def load_model(path: str | os.PathLike) -> onnx.ModelProto:
    """Read and structurally check a model; every failure is a GraphfixError naming the file."""
    p = Path(path)
    if not p.exists():
        raise GraphfixError("no such file", str(p))
    if p.is_dir():
        raise GraphfixError("is a directory, not an ONNX file", str(p))
    try:
        model = onnx.load(str(p))
    except (DecodeError, RuntimeError, ValueError, OSError) as exc:
        raise GraphfixError(f"not a readable ONNX model ({first_line(exc)})", str(p)) from exc
    if not model.graph.node and not model.graph.output:
        raise GraphfixError("not an ONNX model (no graph, no outputs)", str(p))
    check_graph(model, str(p))
    return model


def default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 1


def check_graph(model: onnx.ModelProto, where: str) -> None:
    """Reject graphs graphfix cannot rewrite safely: unsupported opset, cycles, dangling inputs."""
    opset = default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= newest:
        raise GraphfixError(f"unsupported opset {opset} (graphfix handles {MIN_OPSET}..{newest})", where)
    problem = structural_problem(model.graph)
    if problem:
        raise GraphfixError(f"invalid graph: {problem}", where)
    problem = checker_problem(model)
    if problem:
        raise GraphfixError(f"invalid graph: {problem}", where)


def checker_problem(model: onnx.ModelProto, full_check: bool = False) -> str | None:
    """onnx.checker's complaint, if any. An op version the standard has since deprecated (opset-18
    GroupNormalization, which exports and onnxruntime use) is not a problem for graphfix."""
    try:
        onnx.checker.check_model(model, full_check=full_check)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, ...
        text = first_line(exc)
        return None if "is deprecated in domain_version" in text else text
    return None


def structural_problem(graph: onnx.GraphProto) -> str | None:
    """A dangling input or a cycle in the top-level graph, named (one linear Kahn walk)."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    produced = {o: k for k, n in enumerate(graph.node) for o in n.output}
    for n in graph.node:
        for i in n.input:
            if i not in available and i not in produced:
                return f"node '{n.name or n.op_type}' reads '{i}', which no node, initializer or graph input provides"
    waiting = [len({i for i in n.input if i in produced}) for n in graph.node]
    consumers: dict[str, list[int]] = {}
    for k, n in enumerate(graph.node):
        for i in set(n.input):
            if i in produced:
                consumers.setdefault(i, []).append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]
    done = 0
    while ready:
        k = ready.pop()
        done += 1
        for o in graph.node[k].output:
            for c in consumers.get(o, ()):
                waiting[c] -= 1
                if waiting[c] == 0:
                    ready.append(c)
    if done < len(graph.node):
        stuck = next(n for k, n in enumerate(graph.node) if waiting[k] > 0)
        return f"the graph has a cycle (node '{stuck.name or stuck.op_type}' waits on its own output)"
    for o in graph.output:
        if o.name not in produced and o.name not in available:
            return f"graph output '{o.name}' is not produced by any node"
    return None


def passes_full_check(model: onnx.ModelProto) -> bool:
    try:
        return checker_problem(runtime_compatible(model), full_check=True) is None
    except GraphfixError:
        return False


def _loads(ir_version: int, opset: int) -> bool:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - "cannot load" is the answer
        return False
    return True


@functools.cache
def runtime_limits() -> tuple[int, int]:
    """(highest IR version, highest default-domain opset) the installed onnxruntime loads, asked of it."""
    ir = next((v for v in range(onnx.IR_VERSION, 6, -1) if _loads(v, 13)), 7)
    opset = next((v for v in range(onnx.defs.onnx_opset_version(), 12, -1) if _loads(ir, v)), 13)
    return ir, opset


def max_ir_version() -> int:
    return runtime_limits()[0]


def runtime_compatible(model: onnx.ModelProto) -> onnx.ModelProto:
    """Clamp the IR version to what onnxruntime reads, without going below what the opsets need."""
    limit = max_ir_version()
    if model.ir_version <= limit:
        return model
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    if needed > limit:
        raise GraphfixError(f"needs IR version {needed}; the installed onnxruntime reads at most {limit}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = max(needed, min(model.ir_version, limit))
    return out


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Write with an IR version onnxruntime reads, atomically."""
    model = runtime_compatible(model)
    if model.ByteSize() > _PROTO_LIMIT:
        raise GraphfixError("model exceeds 2 GiB; external-data output is not supported yet", str(path))
    write_atomic(path, model.SerializeToString())


def write_atomic(path: str | os.PathLike, data: bytes, what: str = "output") -> None:
    """A temp file in the target directory, then rename: nothing half-written ever remains."""
    p = Path(path)
    if not p.parent.exists():
        raise GraphfixError(f"{what} directory {p.parent} does not exist", str(p))
    if p.is_dir():
        raise GraphfixError(f"{what} path is a directory", str(p))
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, p)
    except OSError as exc:
        raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(p)) from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_output_path(inp: str | os.PathLike, out: str | os.PathLike) -> None:
    """Fail before any work when the output cannot be written or would overwrite the input."""
    pi, po = Path(inp), Path(out)
    if po.exists() and pi.exists() and os.path.samefile(pi, po) or pi.resolve() == po.resolve():
        raise GraphfixError("output path is the input path; graphfix never overwrites its input", str(po))
    if not po.parent.exists():
        raise GraphfixError(f"output directory {po.parent} does not exist", str(po))
    if po.is_dir():
        raise GraphfixError("output path is a directory", str(po))
    if not os.access(po.parent, os.W_OK):
        raise GraphfixError(f"output directory {po.parent} is not writable", str(po))
