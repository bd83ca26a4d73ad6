"""Verification shapes for dynamic inputs, found from what the model says and what actually runs.

Setting every dynamic dim to 1 breaks real exports: a SuperPoint head reshapes H into 8x8 cells
(the dynamo exporter writes the dim as ``8*hc``), reflect padding needs length >= 2, window
attention needs multiples of the window. And the smallest size that runs can mean nothing: a
Swin export at 4x4 keeps one patch token, where onnxruntime's own output for the untouched model
changes from run to run. So the dims are read as expressions over symbols (``8*hc``,
``2*s0 + 1``; a plain name is a symbol; dims sharing a name share a value; an unnamed dynamic
dim is its own symbol), each symbol gets a *role* from where it stands (batch: the first dim;
image: the last two dims of a 4-D float input; length: any other), and the sizes the model was
built for are tried first (batch 1 then 2, images 224 then 256..640, lengths 16 then 32..128);
only then the short ladder of small sizes. A candidate is used only when the original model runs
there, twice with identical outputs, and its outputs are not degenerate (``runs`` says why not).
Two distinct shapes are kept when the model is dynamic, because one shape hides shape bugs (a
rewrite that is only right at n = 1).
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass

import onnx

from graphfix.errors import GraphfixError

#: Values tried for every free symbol, in order (multiples of 2, 3 and 7 for cells and windows).
LADDER = (1, 2, 3, 4, 6, 8, 12, 14, 16, 24, 28, 32, 48, 56, 64)
#: Typical dim sizes per role, tried before the ladder: level k gives every symbol its role's k-th
#: size (224 and 256 are multiples of 32, 16, 8 and 7: patches, strides and windows divide them).
TYPICAL = {"batch": (1, 2), "image": (224, 256, 320, 384, 448, 512, 640), "length": (16, 32, 64, 128)}
#: A candidate whose inputs would hold more elements than this is skipped (the feed/compute budget).
MAX_FEED_ELEMENTS = 1 << 24
#: The larger shape is the smallest ladder value at least this many times the first that runs.
SECOND_FACTOR = 2
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod}

Shapes = dict[str, tuple[int, ...]]


@dataclass
class Choice:
    shapes: list[Shapes]
    reason: str
    tried: int = 0


def _symbols(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def _eval(expr: ast.AST, env: dict[str, int]) -> int:
    if isinstance(expr, ast.Expression):
        return _eval(expr.body, env)
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int):
        return expr.value
    if isinstance(expr, ast.Name):
        return env[expr.id]
    if isinstance(expr, ast.BinOp) and type(expr.op) in _OPS:
        return _OPS[type(expr.op)](_eval(expr.left, env), _eval(expr.right, env))
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return -_eval(expr.operand, env)
    raise ValueError("unsupported dim expression")


def _parse(param: str) -> ast.AST | None:
    try:
        expr = ast.parse(param.replace("//", "/"), mode="eval")
        _eval(expr, dict.fromkeys(_symbols(expr), 1))
        return expr
    except (SyntaxError, ValueError, KeyError, ZeroDivisionError, TypeError):
        return None


def dynamic_dims(model: onnx.ModelProto, given: Shapes) -> dict[str, list[ast.AST | int | None]]:
    """Per graph input not in ``given``: each dim as an int, a parsed expression, or None (free).
    A symbol a given input's dim is named by takes its value everywhere (``--input-shapes
    input_ids:1x16`` sets the ``batch``/``sequence`` of ``attention_mask`` too)."""
    bound = bound_symbols(model, given)
    inits = {t.name for t in model.graph.initializer}
    dims: dict[str, list[ast.AST | int | None]] = {}
    for k, vi in enumerate(model.graph.input):
        if vi.name in inits or vi.name in given or not vi.type.HasField("tensor_type"):
            continue
        row: list[ast.AST | int | None] = []
        for j, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                row.append(d.dim_value)
                continue
            expr = (_parse(d.dim_param) if d.dim_param else None) or ast.parse(f"_unnamed_{k}_{j}", mode="eval")
            row.append(_eval(expr, bound) if _symbols(expr) <= set(bound) else _bind(expr, bound))
        if any(not isinstance(d, int) for d in row):
            dims[vi.name] = row
    return dims


def bound_symbols(model: onnx.ModelProto, given: Shapes) -> dict[str, int]:
    """Dim names of the given inputs that are plain symbols, with the given values."""
    bound: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name not in given or not vi.type.HasField("tensor_type"):
            continue
        for d, v in zip(vi.type.tensor_type.shape.dim, given[vi.name], strict=False):
            if d.dim_param and d.dim_param.isidentifier():
                bound.setdefault(d.dim_param, int(v))
    return bound


def complete(model: onnx.ModelProto, given: Shapes) -> Shapes:
    """``given`` plus every other input whose dims the given ones determine."""
    rows = dynamic_dims(model, given)
    bound = bound_symbols(model, given)
    inits = {t.name for t in model.graph.initializer}
    done = dict(given)
    for vi in model.graph.input:
        if vi.name in inits or vi.name in given or vi.name in rows or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):  # dynamic, and fully bound by the given names
            done[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else _eval(_parse(d.dim_param), bound) for d in dims)
    return done


class _Bind(ast.NodeTransformer):
    def __init__(self, bound: dict[str, int]) -> None:
        self.bound = bound

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802 - ast's visitor naming
        return ast.Constant(self.bound[node.id]) if node.id in self.bound else node


def _bind(expr: ast.AST, bound: dict[str, int]) -> ast.AST:
    return _Bind(bound).visit(expr) if bound else expr


def candidate(dims: dict[str, list], value: int) -> Shapes | None:
    """Every free symbol set to ``value``; None when a dim comes out below 1."""
    symbols = set().union(*(_symbols(d) for row in dims.values() for d in row if not isinstance(d, int)))
    return _evaluate(dims, dict.fromkeys(symbols, value))


def roles(model: onnx.ModelProto, dims: dict[str, list]) -> dict[str, str]:
    """Per free symbol: batch (first dim), image (the last two dims of a 4-D float input, both
    dynamic: SAM's points [b, p, n, 2] are not an image) or length."""
    floats = {vi.name for vi in model.graph.input if vi.type.tensor_type.elem_type in _FLOAT_TYPES}
    found: dict[str, str] = {}
    for name, row in dims.items():
        for j, d in enumerate(row):
            if isinstance(d, int):
                continue
            image = len(row) == 4 and j >= 2 and name in floats and not any(isinstance(x, int) for x in row[2:])
            role = "batch" if j == 0 and len(row) > 1 else "image" if image else "length"
            for sym in _symbols(d):
                if found.get(sym) in (None, "length"):
                    found[sym] = role
    return found


_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def typical(dims: dict[str, list], role_of: dict[str, str], level: int) -> Shapes | None:
    """Every symbol at its role's ``level``-th typical size: a symbol inside an expression
    (``8*hc``) gets the smallest value that makes the dim reach that size."""
    env: dict[str, int] = {}
    for row in dims.values():
        for d in row:
            if isinstance(d, int):
                continue
            for sym in sorted(_symbols(d)):
                if sym in env:
                    continue
                role = role_of.get(sym, "length")
                sizes = TYPICAL[role]
                if level >= len(sizes) and role != "batch":
                    return None
                env[sym] = _reaching(d, sym, sizes[level % len(sizes)], env)
    return _evaluate(dims, env)


def _reaching(expr: ast.AST, sym: str, size: int, env: dict[str, int]) -> int:
    """The smallest v in 1..size with expr(sym=v, others 1 or set) >= size (size itself if none)."""
    others = {s: env.get(s, 1) for s in _symbols(expr)}
    for v in range(1, size + 1):
        try:
            if _eval(expr, {**others, sym: v}) >= size:
                return v
        except (ZeroDivisionError, KeyError, ValueError):
            return size
    return size


def _evaluate(dims: dict[str, list], env: dict[str, int]) -> Shapes | None:
    shapes: Shapes = {}
    for name, row in dims.items():
        values = [d if isinstance(d, int) else _eval(d, env) for d in row]
        if any(v < 1 for v in values):
            return None
        shapes[name] = tuple(values)
    return shapes


def _elements(shapes: Shapes) -> int:
    total = 0
    for dims in shapes.values():
        n = 1
        for d in dims:
            n *= d
        total += n
    return total


def choose(model: onnx.ModelProto, given: list[Shapes], runs, where: str | None = None) -> Choice:
    """Shapes to verify at: the user's (each ``--input-shapes`` set), else found by trying.

    ``runs(shapes) -> str | None`` runs the input model at those shapes and returns why they cannot
    be used (an error, nondeterministic or degenerate outputs), if anything.
    """
    given = [complete(model, g) for g in given]
    base = given[0] if given else {}
    dims = dynamic_dims(model, base)
    if not dims:
        return Choice(given or [{}], "static shapes" if not given else "given with --input-shapes")
    if given and all(not dynamic_dims(model, g) for g in given):
        return Choice(given, "given with --input-shapes")
    role_of = roles(model, dims)
    tried, errors, found = 0, [], []
    for level in range(max(len(v) for v in TYPICAL.values())):
        shapes = typical(dims, role_of, level)
        if shapes is None or _elements({**base, **shapes}) > MAX_FEED_ELEMENTS:
            continue
        full = {**base, **shapes}
        if full in [f for _, f in found]:
            continue
        tried += 1
        error = runs(full)
        if error is None:
            found.append((level, full))
            if len(found) == 2:
                picked = [f for _, f in found]
                kinds = ", ".join(f"{sym}: {role}" for sym, role in sorted(role_of.items()))
                return Choice(picked, f"dynamic dims set to the sizes their role suggests ({kinds}): "
                                      f"{' and '.join(describe(s) for s in picked)}", tried)
        else:
            errors.append(f"{describe(full)}: {error}")
    typical_one = found[0][1] if found else None
    found = []
    for value in LADDER:
        shapes = candidate(dims, value)
        if shapes is None:
            continue
        full = {**base, **shapes}
        if full == typical_one:
            continue
        tried += 1
        error = runs(full)
        if error is None and typical_one is not None:
            return Choice([typical_one, full], f"dynamic dims set to the sizes their role suggests ({describe(typical_one)}; "
                                               f"the other typical sizes did not run) and, from the ladder, {describe(full)}", tried)
        if error is None:
            found.append((value, full))
            if len(found) == 1:
                continue
            if value >= SECOND_FACTOR * found[0][0]:
                break
            found.pop()
        elif not found:
            errors.append(f"{describe(full)}: {error}")
    if not found:
        listing = "; ".join(errors[:4])
        raise GraphfixError(
            f"onnxruntime cannot run the input model at any candidate shape ({tried} tried: {listing}); "
            "set shapes with --input-shapes name:1x3x224x224", where)
    picked = [s for _, s in found[:2]]
    values = ", ".join(str(v) for v, _ in found[:2])
    return Choice(picked, f"dynamic dims found by trying candidate sizes (free symbols = {values}): "
                          f"{' and '.join(describe(s) for s in picked)}", tried)


def describe(shapes: Shapes) -> str:
    return ",".join(f"{k}:{'x'.join(map(str, v))}" for k, v in shapes.items())
