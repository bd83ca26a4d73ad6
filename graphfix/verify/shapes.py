"""Verification shapes for dynamic inputs, found from what the model says and what actually runs.

Setting every dynamic dim to 1 breaks real exports: a SuperPoint head reshapes H into 8x8 cells
(the dynamo exporter writes the dim as ``8*hc``), reflect padding needs length >= 2, window
attention needs multiples of the window. And the smallest size that runs can mean nothing: a
Swin export at 4x4 keeps one patch token, where onnxruntime's own output for the untouched model
changes from run to run. So the dims are read as expressions over symbols (``8*hc``,
``2*s0 + 1``; a plain name is a symbol; dims sharing a name share a value; an unnamed dynamic
dim is its own symbol), each symbol gets a *role* from where it stands (batch: the first dim;
image: the last two dims of a 4-D float input; length: any other), and the sizes the model was
built for are tried first (batch 1 then 2, images 224 then 256..640 then 128..32,
lengths 16 then 32..128);
only then the short ladder of small sizes. A candidate is used only when the original model runs
there, twice with identical outputs, and its outputs are not degenerate (``runs`` says why not).
Two distinct shapes are kept when the model is dynamic, because one shape hides shape bugs (a
rewrite that is only right at n = 1).

Names are not enough when an exporter names related dims apart: an LLM decode step's
``attention_mask`` is as long as its KV cache plus the new tokens, but the legacy exporter calls the
three ``total_sequence``, ``past_sequence`` and ``sequence``, and every candidate that makes them
equal fails. So when a candidate fails, the relations are read from the graph (:func:`relations`:
what onnxruntime's symbolic shape inference merges, what a Gather's positions suggest) and solved
(:class:`System`), and the candidates that satisfy them are tried first. And the sizes a role
suggests can be far too big: a latent decoder given 224x224 latents makes 1792x1792 images (a run
grew to 20.9 GB), so an image input that the outputs grow from several times is a *latent* with
latent sizes, and every candidate's run is estimated from onnx's shape inference before it is tried
(:class:`Budget`; ``--max-memory``): one over the budget is not run.

Before any run, what the graph's ops say about the dims is read (:mod:`graphfix.verify.graph_dims`):
a channel count from the Conv weight it meets, the minimum a reflect Pad or a kernel needs, the
stride product a spatial dim must be a multiple of (:func:`strides`), the dims an LSTM or a
broadcast needs equal; a run that fails because a dim was too short raises it (``too_short``).
:attr:`Choice.guessed` records every dim the search set and how.
"""

from __future__ import annotations

import ast
import itertools
import math
import operator
import re
from dataclasses import dataclass, field

import onnx

from graphfix.errors import GraphfixError
from graphfix.settings.checks import memory_text
from graphfix.verify import graph_dims

#: Values tried for every free symbol, in order (multiples of 2, 3 and 7 for cells and windows).
LADDER = (1, 2, 3, 4, 6, 8, 12, 14, 16, 24, 28, 32, 48, 56, 64)
#: Typical dim sizes per role, tried before the ladder: level k gives every symbol its role's k-th
#: size (224 and 256 are multiples of 32, 16, 8 and 7: patches, strides and windows divide them).
#: A latent is an image input whose output is several times larger (a VAE decoder's 8x): it gets
#: the sizes latent decoders are exported at (Stable Diffusion's 64 for 512 images), not 224.
#: Images end with 128, 64, 32: a UNet denoiser over the budget at 224 is verified at 64x64 (a size
#: every stride divides), not at the ladder's 2x2.
TYPICAL = {"batch": (1, 2), "image": (224, 256, 320, 384, 448, 512, 640, 128, 64, 32), "length": (16, 32, 64, 128),
           "latent": (32, 64, 16, 48)}
#: A candidate whose inputs would hold more elements than this is skipped (the feed/compute budget).
MAX_FEED_ELEMENTS = 1 << 24
#: The larger shape is the smallest ladder value at least this many times the first that runs.
SECOND_FACTOR = 2
#: Default --max-memory (bytes): the estimated peak of one onnxruntime run of the input model at a
#: candidate shape: its weights plus ARENA_FACTOR times the largest set of live intermediates.
DEFAULT_MAX_MEMORY = 4 << 30
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod}

Shapes = dict[str, tuple[int, ...]]


@dataclass
class Choice:
    """The shapes verification runs at, and why.

    ``guessed`` records every dynamic input dim the search set (none for ``--input-shapes``), one
    plain dict per declared dim (JSON as it is; the report keeps it as ``shapes.guessed``)::

        {"dim": "num_channels",            # the declared dim_param, or "?" for an unnamed dim
         "inputs": [["pixel_values", 1]],  # every (input, axis) that declares it
         "values": [3, 3],                 # its size in each of ``shapes``, in order
         "how": "graph",                   # graph | relation | role | ladder | learned
         "role": "fixed",                  # fixed (by an op), batch, image, length, latent
         "why": "/Conv's weight (W.shape[1] x group)",
         "minimum": 1, "multiple": 1,      # the least size and the stride the graph asks for
         "equals": None}                   # the dim it was set equal to (an LSTM's state batch)

    ``how``: *graph* a size an op fixes (a Conv's input channels), *relation* solved from another
    dim the graph relates it to, *role* its role's typical size, *ladder* the small sizes tried
    last, *learned* a size raised after onnxruntime said it was too short. Dims with equal
    ``values`` and an ``equals`` (or one ``dim`` name) must stay equal in any profile."""

    shapes: list[Shapes]
    reason: str
    tried: int = 0
    guessed: list[dict] = field(default_factory=list)


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


#: A dim_param longer than this is not parsed: it is a name like any other that is no expression
#: (a 3000-term ``N+N+...`` nests 3000 deep, past Python's recursion limit in ``ast.parse``).
MAX_DIM_EXPRESSION = 200


def _parse(param: str) -> ast.AST | None:
    """A dim_param as an expression over symbols (``2*seq+1``), or None: a name it cannot read."""
    if len(param) > MAX_DIM_EXPRESSION:
        return None
    try:
        expr = ast.parse(param.replace("//", "/"), mode="eval")
        _eval(expr, dict.fromkeys(_symbols(expr), 1))
        return expr
    except (SyntaxError, ValueError, KeyError, ZeroDivisionError, TypeError, RecursionError, MemoryError):
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


#: Per symbol, what the graph asks of its size: (minimum, multiple) (:func:`fitted`).
Fit = dict[str, tuple[int, int]]


def fitted(value: int, rule: tuple[int, int] | None) -> int:
    """The smallest size >= ``value`` that meets ``rule`` (minimum, multiple)."""
    if rule is None:
        return value
    least, multiple = rule
    return -(-max(value, least) // multiple) * multiple


def candidate(dims: dict[str, list], value: int, system: System | None = None, fit: Fit | None = None) -> Shapes | None:
    """Every free symbol set to ``value`` (raised to what ``fit`` asks of it; a ``system``'s
    dependent symbols solved from them); None when a dim comes out below 1 or the system has no
    solution there."""
    symbols = set().union(*(_symbols(d) for row in dims.values() for d in row if not isinstance(d, int)))
    env = {s: fitted(value, (fit or {}).get(s)) for s in symbols - set(system.dependent if system else ())}
    env = system.solve(env) if system else env
    return None if env is None else _evaluate(dims, env)


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


def typical(dims: dict[str, list], role_of: dict[str, str], level: int, system: System | None = None,
            fit: Fit | None = None) -> Shapes | None:
    """Every symbol at its role's ``level``-th typical size (those ``fit`` allows: :func:`role_sizes`):
    a symbol inside an expression (``8*hc``) gets the smallest value that makes the dim reach that
    size; a ``system``'s dependent symbols are solved from the others."""
    env: dict[str, int] = {}
    dependent = set(system.dependent) if system else set()
    for row in dims.values():
        for d in row:
            if isinstance(d, int):
                continue
            for sym in sorted(_symbols(d)):
                if sym in env or sym in dependent:
                    continue
                role = role_of.get(sym, "length")
                sizes = role_sizes(role, (fit or {}).get(sym))
                if level >= len(sizes) and role != "batch":
                    return None
                env[sym] = _reaching(d, sym, sizes[level % len(sizes)], env)
    if system:
        env = system.solve(env)
    return None if env is None else _evaluate(dims, env)


def role_sizes(role: str, rule: tuple[int, int] | None = None) -> tuple[int, ...]:
    """A role's typical sizes that meet ``rule`` (minimum, multiple), else raised to it, each once,
    and at least two of them (a 16 kHz VAD whose reflect Pad needs 65 samples: 128 and 256)."""
    sizes = TYPICAL[role]
    if rule is None:
        return sizes
    out = [size for size in sizes if fitted(size, rule) == size]
    for size in sizes if len(out) < 2 else ():
        if fitted(size, rule) not in out:
            out.append(fitted(size, rule))
    while len(out) < 2:
        out.append(fitted(out[-1] * 2, rule))
    return tuple(out)


def _reaching(expr: ast.AST, sym: str, size: int, env: dict[str, int]) -> int:
    """The smallest v in 1..size with expr(sym=v, others 1 or set) >= size (size itself if none)."""
    others = {s: env.get(s, 1) for s in _symbols(expr)}
    if len(others) == 1 and isinstance(getattr(expr, "body", expr), ast.Name):
        return size
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


def choose(model: onnx.ModelProto, given: list[Shapes], runs, where: str | None = None,
           max_memory: int = DEFAULT_MAX_MEMORY) -> Choice:
    """Shapes to verify at: the user's (each ``--input-shapes`` set), else found by trying.

    ``runs(shapes) -> str | None`` runs the input model at those shapes and returns why they cannot
    be used (an error, nondeterministic or degenerate outputs), if anything. A candidate whose run
    is estimated (:class:`Budget`) over ``max_memory`` bytes or the time budget is not run. When a
    candidate fails, the graph's relations between dims (:func:`relations`) are solved for and the
    candidates that satisfy them tried first.
    """
    given = [complete(model, g) for g in given]
    base = given[0] if given else {}
    dims = dynamic_dims(model, base)
    if not dims:
        return Choice(given or [{}], "static shapes" if not given else "given with --input-shapes")
    if given and all(not dynamic_dims(model, g) for g in given):
        return Choice(given, "given with --input-shapes")
    declared = dims
    budget = Budget(model, max_memory)
    facts = graph_dims.read(model, plain_symbols(dims), MAX_ANALYSED_NODES, budget.stub)
    fixed = {sym: size for sym, (size, _) in facts.sizes.items()}
    dims = _fix(dims, fixed)
    role_of = roles(model, dims)
    for sym, axes in facts.spatial.items():  # a Conv's spatial dim: an image's side, or a signal's length
        if role_of.get(sym) not in (None, "batch"):
            role_of[sym] = "image" if axes >= 2 else "length"
    for a, b, _ in facts.equal:  # a recurrent state's batch is a batch
        if "batch" in (role_of.get(a), role_of.get(b)) and a in role_of and b in role_of:
            role_of[a] = role_of[b] = "batch"
    factor = upsampling(budget, dims, role_of)
    role_of.update(dict.fromkeys(factor, "latent"))
    fit: Fit = {sym: (least, 1) for sym, (least, _) in facts.minimum.items() if sym in role_of}
    for sym, multiple in strides(budget, dims, role_of, facts.spatial).items():
        fit[sym] = (fit.get(sym, (1, 1))[0], multiple)
    reading = _Reading(declared, facts, fit, role_of)
    search = _Search(base, runs, budget, reading)
    plain = System([], dims, role_of, "")
    equal = _system(reading.equations(), dims, role_of, "the ops that need them equal") if reading.equations() else None
    levels = range(max(len(v) for v in TYPICAL.values()))
    systems = [equal, plain] if equal is not None else [plain]
    queue = [(system, level) for system in systems for level in levels]
    found, analysed = [], False
    guessed = False
    while queue or not (guessed or found):
        if not queue:  # nothing from the graph ran: relations the errors point at, one at a time
            guessed = True
            extra = _error_systems(dims, role_of, search.errors)
            queue = [(s, 0) for s in extra]
            continue
        system, level = queue.pop(0)
        full = search.attempt(typical(dims, role_of, level, system, fit), system)
        if full is not None:
            found.append(full)
            if len(found) == 2:
                kinds = ", ".join(f"{sym}: {role}" for sym, role in sorted(role_of.items()))
                return search.choice(found, f"dynamic dims set to the sizes their role suggests ({kinds}"
                                            f"{_upsampled(factor)}): {' and '.join(describe(s) for s in found)}", systems, "role")
            if system not in systems:  # an error's relation that holds: its other sizes next
                systems = [system, *systems]
                queue = [(system, k) for k in levels if k != level]
        elif search.failed:
            if search.learn():  # a dim was too short for a node: its longer sizes, from the first
                queue = [(system, k) for k in levels] + queue
            if not analysed:
                analysed = True
                extra = _systems(model, dims, role_of, fixed)
                systems = [*extra, *systems]
                queue = [(s, level) for s in extra for level in levels] + queue
    typical_one = found[0] if found else None
    for system in systems:
        found = []
        for value in LADDER:
            full = search.attempt(candidate(dims, value, system, fit), system, typical_one)
            if full is not None and typical_one is not None:
                return search.choice([typical_one, full], f"dynamic dims set to the sizes their role suggests "
                                     f"({describe(typical_one)}; the other typical sizes did not run) and, from the ladder, "
                                     f"{describe(full)}", systems, "ladder")
            if full is None:
                if search.failed:
                    search.learn()
                continue
            found.append((value, full))
            if len(found) == 1:
                continue
            if value >= SECOND_FACTOR * found[0][0]:
                break
            found.pop()
        if found:
            picked = [f for _, f in found[:2]]
            values = ", ".join(str(v) for v, _ in found[:2])
            return search.choice(picked, f"dynamic dims found by trying candidate sizes (free symbols = {values}): "
                                         f"{' and '.join(describe(s) for s in picked)}", systems, "ladder")
    if typical_one is not None:  # a model that runs at one size only (paddle2onnx's NMS at batch 1): verified there
        return search.choice([typical_one], f"dynamic dims set to the sizes their role suggests: {describe(typical_one)}; "
                                            "no other size tried ran, so the model is verified at this one only (give "
                                            "--input-shapes for others)", systems, "role")
    raise search.nothing(where)


def plain_symbols(dims: dict[str, list]) -> dict[tuple[str, int], str]:
    """(input, axis) -> symbol, for the dims that are one symbol (``batch``, not ``8*hc``)."""
    return {(name, j): d.body.id for name, row in dims.items() for j, d in enumerate(row)
            if not isinstance(d, int) and isinstance(getattr(d, "body", None), ast.Name)}


def _fix(dims: dict[str, list], fixed: dict[str, int]) -> dict[str, list]:
    """``dims`` with the symbols an op fixes (a Conv's input channels) set; every input stays."""
    if not fixed:
        return dims
    out = {}
    for name, row in dims.items():
        out[name] = [d if isinstance(d, int) else _eval(d, fixed) if _symbols(d) <= set(fixed) else _bind(d, fixed) for d in row]
    return out


#: A spatial symbol's strides are measured by onnx's inference at this size and twice it (divisible
#: by the stride products of image and audio models: 2^10, 3^2, 5, 7).
_STRIDE_PROBE = 2**10 * 3**2 * 5 * 7
#: A measured stride product above this is not asked of a size (a 1-D stack of many strides).
MAX_MULTIPLE = 1024


def strides(budget: Budget, dims: dict[str, list], role_of: dict[str, str], spatial: dict[str, int]) -> dict[str, int]:
    """Per spatial symbol (one a Conv/pool reads as a spatial axis): the product of the strides its
    dim is divided by on the way through the model (a UNet's 8 for three 2x downsamplings, whose
    skip Concats then match after upsampling), measured as every tensor's dim at two sizes."""
    syms = sorted(s for s in spatial if role_of.get(s) in ("image", "length", "latent"))
    if not syms:
        return {}
    probes = []
    for value in (_STRIDE_PROBE, 2 * _STRIDE_PROBE):
        env = {s: value if s in syms else TYPICAL.get(r, TYPICAL["length"])[0] for s, r in role_of.items()}
        shapes = _evaluate(dims, env)
        got = None if shapes is None else budget.tensor_dims(shapes)
        if not got:
            return {}
        probes.append(got)
    multiple = 1
    for name, a in probes[0].items():
        b = probes[1].get(name, ())
        for x, y in zip(a, b, strict=False):
            step = y - x
            if 0 < step < _STRIDE_PROBE and _STRIDE_PROBE % step == 0 and math.lcm(multiple, _STRIDE_PROBE // step) <= MAX_MULTIPLE:
                multiple = math.lcm(multiple, _STRIDE_PROBE // step)
    return dict.fromkeys(syms, multiple) if multiple > 1 else {}


#: At most this many times a run's "too short" error raises sizes (each retries the typical sizes).
MAX_LESSONS = 6


class _Reading:
    """What the graph said about the dims (:mod:`graphfix.verify.graph_dims`), what runs taught,
    and the record of every dim the search set (:attr:`Choice.guessed`)."""

    def __init__(self, declared: dict[str, list], facts: graph_dims.DimFacts, fit: Fit, role_of: dict[str, str]) -> None:
        self.declared, self.facts, self.fit, self.role_of = declared, facts, fit, role_of
        self.learned: dict[str, str] = {}
        self.lessons = 0

    def equations(self) -> list:
        """The equalities the ops need, between symbols still free."""
        import sympy

        return [sympy.Symbol(a, integer=True, positive=True) - sympy.Symbol(b, integer=True, positive=True)
                for a, b, _ in self.facts.equal if a in self.role_of and b in self.role_of]

    def learn(self, error: str, shapes: Shapes) -> bool:
        """Raise the minimum of the symbols a too-short node read (``graph_dims.too_short``); any
        length/image symbol when the walk did not reach that node. True when one was raised."""
        short = graph_dims.too_short(error)
        if short is None or self.lessons >= MAX_LESSONS:
            return False
        self.lessons += 1
        node, factor = short
        values = {sym: shapes[name][j] for (name, j), sym in plain_symbols(self.declared).items() if name in shapes}
        blamed = [s for s in self.facts.reaches.get(node, ()) if s in values and self.role_of.get(s) not in (None, "batch")]
        blamed = blamed or [s for s in values if self.role_of.get(s) in ("length", "image", "latent")]
        raised = False
        for sym in blamed:
            least, multiple = self.fit.get(sym, (1, 1))
            size = math.ceil(values[sym] * factor)
            if size > least:
                self.fit[sym] = (size, multiple)
                self.learned[sym] = f"onnxruntime said {node} needed it longer than {values[sym]}"
                raised = True
        return raised

    def guessed(self, picked: list[Shapes], how: str, system: System | None) -> list[dict]:
        """:attr:`Choice.guessed` for the shapes ``picked``."""
        records: dict[str, dict] = {}
        for name, row in self.declared.items():
            for j, d in enumerate(row):
                if isinstance(d, int):
                    continue
                key = ast.unparse(d)
                rec = records.setdefault(key, {"dim": "?" if key.startswith("_unnamed_") else key, "inputs": [],
                                               "values": [p[name][j] for p in picked if name in p]})
                rec["inputs"].append([name, j])
                if len(rec["inputs"]) > 1:
                    continue
                sym = key if isinstance(getattr(d, "body", None), ast.Name) else None
                least, multiple = self.fit.get(sym, (1, 1))
                first = sym or min(_symbols(d), default="")
                rec.update({"how": how, "role": self.role_of.get(first, "length"), "why": "",
                            "minimum": least, "multiple": multiple, "equals": None})
                if sym in self.facts.sizes:
                    rec.update(how="graph", role="fixed", why=self.facts.sizes[sym][1])
                elif system is not None and sym in system.dependent:
                    pair = next(((a, b, w) for a, b, w in self.facts.equal if sym in (a, b)), None)
                    rec.update(how="relation", equals=pair and (pair[0] if pair[1] == sym else pair[1]),
                               why=pair[2] if pair else f"{system.name}: {system.describe()}")
                elif sym in self.learned:
                    rec.update(how="learned", why=self.learned[sym])
                else:
                    why = [self.facts.minimum[sym][1]] if sym in self.facts.minimum else []
                    why += [f"a multiple of {multiple}: the strides it passes"] if multiple > 1 else []
                    rec["why"] = "; ".join(["its role's typical size"] * (how == "role") + why)
        return list(records.values())


def _upsampled(factor: dict[str, int]) -> str:
    return f"; the output is {max(factor.values())}x {', '.join(sorted(factor))}: a latent" if factor else ""


def _systems(model: onnx.ModelProto, dims: dict[str, list], role_of: dict[str, str],
             fixed: dict[str, int] | None = None) -> list[System]:
    """The relation systems to try, most assumed first: the graph's equations and an index's
    guesses, then the equations alone (the symbols an op fixes, ``fixed``, set in them)."""
    try:
        equations, guesses = relations(model)
        if fixed:
            equations, guesses = ([e for e in (_substituted(eq, fixed) for eq in found) if e is not None]
                                  for found in (equations, guesses))
    except Exception:  # noqa: BLE001 - a best-effort reading of the graph: none, the search goes on by names
        equations, guesses = [], []
    out = []
    if guesses:
        out.append(_system(equations + guesses, dims, role_of, "relations the graph implies and its gathers suggest"))
    if equations:
        out.append(_system(equations, dims, role_of, "relations the graph implies"))
    return [s for s in out if s is not None and (s.dependent or s.checks)]


def _substituted(eq, fixed: dict[str, int]):
    """``eq`` with the fixed symbols' sizes, or None when nothing free is left in it."""
    eq = eq.subs({s: fixed[s.name] for s in eq.free_symbols if s.name in fixed})
    return eq if eq.free_symbols else None


def _system(equations: list, dims: dict[str, list], role_of: dict[str, str], name: str) -> System | None:
    try:
        return System(equations, dims, role_of, name)
    except Exception:  # noqa: BLE001 - sympy refuses some expressions: that relation is not tried
        return None


#: A run's error that says an index or a broadcast went past a dim: another dim should be larger.
_BOUND_ERROR = re.compile(r"out of (?:data )?bounds|invalid index|must be within|broadcast|incompatible dimensions", re.I)
#: At most this many length symbols are related by guessing from errors (the guesses grow as n^3).
MAX_GUESSED_SYMBOLS = 4


#: A run's error that says two dims should have matched (a broadcast, an LSTM's ``initial_h`` against
#: its ``X``): any two symbols are tried equal.
_MISMATCH_ERROR = re.compile(r"broadcast|must have shape|incompatible dimensions|mismatch|do not match|not equal", re.I)
#: At most this many symbols are paired by guessing from a mismatch (n(n-1)/2 guesses).
MAX_PAIRED_SYMBOLS = 6


def _error_systems(dims: dict[str, list], role_of: dict[str, str], errors: list[str]) -> list[System]:
    """When the graph said nothing that ran: after a mismatch between dims ("Input initial_h must
    have shape {1,2,128}. Actual:{1,128,128}"), any two symbols equal (a recurrent state's batch named
    apart from its input's); after an index or a broadcast past a dim ("invalid index found, index =
    16" where a mask is as long as a cache plus the new tokens), each length symbol as the sum of two
    others, as another plus one, or as twice another; each tried on its own."""
    import sympy

    free = sorted(role_of)
    sym = {s: sympy.Symbol(s, integer=True, positive=True) for s in free}
    equations = []
    if any(_MISMATCH_ERROR.search(e) for e in errors) and 2 <= len(free) <= MAX_PAIRED_SYMBOLS:
        equations += [sym[a] - sym[b] for a, b in itertools.combinations(free, 2)]
    lengths = [s for s in free if role_of[s] == "length"]
    if any(_BOUND_ERROR.search(e) for e in errors) and 2 <= len(lengths) <= MAX_GUESSED_SYMBOLS:
        for a in lengths:
            others = [b for b in lengths if b != a]
            equations += [sym[a] - sym[b] - sym[c] for b, c in itertools.combinations(others, 2)]
            equations += [e for b in others for e in (sym[a] - sym[b] - 1, sym[a] - 2 * sym[b])]
    systems = [_system([eq], dims, role_of, "a relation the run's errors suggested") for eq in dict.fromkeys(equations)]
    return [s for s in systems if s is not None]


class _Search:
    """The candidates run so far: each at most once, none over the budget, the errors kept."""

    def __init__(self, base: Shapes, runs, budget: Budget, reading: _Reading) -> None:
        self.base, self.runs, self.budget, self.reading = base, runs, budget, reading
        self.tried, self.errors, self.over, self.seen, self.failed = 0, [], [], [], False
        self.too_big: list[str] = []  # candidates whose inputs hold over MAX_FEED_ELEMENTS
        self.last: tuple[Shapes, str] | None = None  # the last failed run: its shapes and error
        self.by: dict[str, System] = {}  # shapes that ran -> the system they were solved in

    def attempt(self, shapes: Shapes | None, system: System, skip: Shapes | None = None) -> Shapes | None:
        """The full shapes if the model runs there; None if it does not, or they were seen, or
        are over the budget (``self.failed`` says whether a run failed)."""
        self.failed = False
        if shapes is None:
            return None
        full = {**self.base, **shapes}
        if full in self.seen or full == skip:
            return None
        if _elements(full) > MAX_FEED_ELEMENTS:
            self.too_big.append(describe(full))
            return None
        self.seen.append(full)
        over = self.budget.over(full)
        if over:
            self.over.append(f"{describe(full)}: {over}")
            return None
        self.tried += 1
        error = self.runs(full)
        if error is None:
            self.by[describe(full)] = system
            return full
        self.failed = True
        self.errors.append(f"{describe(full)}: {error}")
        self.last = (full, error)
        return None

    def learn(self) -> bool:
        """Whether the last failed run's error raised a dim's minimum (:meth:`_Reading.learn`)."""
        return self.last is not None and self.reading.learn(self.last[1], self.last[0])

    def choice(self, picked: list[Shapes], reason: str, systems: list[System], how: str) -> Choice:
        solved = [self.by[describe(p)] for p in picked if self.by[describe(p)].equations]
        reading = self.reading
        fixed = {s: reading.facts.sizes[s] for s in reading.facts.sizes}
        if fixed:
            reason += "; read from the graph: " + ", ".join(f"{s} = {v} ({why})" for s, (v, why) in sorted(fixed.items()))
        asked = {s: r for s, r in reading.fit.items() if r != (1, 1)}
        if asked:
            reason += "; sizes the graph asks for: " + ", ".join(
                ", ".join([f"{s} >= {lo}"] * (lo > 1) + [f"{s} a multiple of {m}"] * (m > 1)) for s, (lo, m) in sorted(asked.items()))
        if solved and solved[0].describe():
            reason += f"; dims related by {solved[0].name}: {solved[0].describe()}"
        costs = [self.budget.cost(p) for p in picked]
        if all(c is not None for c in costs):
            worst = max(costs, key=lambda c: c.memory)
            reason += (f"; within the budget: an estimated {memory_text(worst.memory)} of --max-memory "
                       f"{memory_text(self.budget.max_memory)} and {worst.work:.2g} of {self.budget.max_work:.2g} multiply-adds a run")
        if self.over:
            reason += f" ({len(self.over)} larger candidate(s) not run, over it: {self.over[0]})"
        return Choice(picked, reason, self.tried, reading.guessed(picked, how, solved[0] if solved else None))

    def nothing(self, where: str | None) -> GraphfixError:
        if not self.tried and self.over:
            return GraphfixError(f"every candidate shape is over the budget ({'; '.join(self.over[:3])}); "
                                 "raise --max-memory or set shapes with --input-shapes name:1x3x224x224", where)
        if not self.tried:  # every candidate skipped before running: no "(0 tried: )"
            return GraphfixError(f"no candidate shape was run: each would feed more than {MAX_FEED_ELEMENTS} input elements "
                                 f"(the first: {self.too_big[0] if self.too_big else 'none'}); "
                                 "set shapes with --input-shapes name:1x3x224x224", where)
        listing = "; ".join(self.errors[:4])
        over = f"; {len(self.over)} not run, over the budget (--max-memory)" if self.over else ""
        return GraphfixError(f"onnxruntime cannot run the input model at any candidate shape ({self.tried} tried: {listing}{over}); "
                             "set shapes with --input-shapes name:1x3x224x224", where)


def describe(shapes: Shapes) -> str:
    return ",".join(f"{k}:{'x'.join(map(str, v))}" for k, v in shapes.items())



# ---------------------------------------------------------------- a run's cost, estimated before running it
#: Estimated activation memory is this many times the bytes of the tensors alive at once
#: (onnxruntime's arena rounds allocations up and grows in chunks).
ARENA_FACTOR = 2
#: The time budget: multiply-adds (Conv, MatMul, Gemm) plus elements written by the other ops in one
#: run at a candidate shape (2**35: some seconds of this machine's onnxruntime on 2 cores).
MAX_WORK = 1 << 35
#: Initializers up to this many elements keep their values for shape inference (Reshape targets,
#: axes, scales); larger ones enter it as inputs of their shape (only their shape matters there).
_VALUE_LIMIT = 4096


def _stub(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph without its weights' values (big initializers become inputs of their shape), its
    outputs untyped (an exporter's output dim names say nothing about the inputs: a legacy VAE
    export names the image's batch and height alike), its unnamed dynamic dims named as
    ``dynamic_dims`` names them."""
    stub = onnx.ModelProto()
    stub.ir_version, stub.producer_name = model.ir_version, model.producer_name
    stub.opset_import.extend(model.opset_import)
    stub.functions.extend(model.functions)
    g = stub.graph
    g.node.extend(model.graph.node)
    inits = {t.name for t in model.graph.initializer}
    for k, vi in enumerate(model.graph.input):
        if vi.name in inits:
            continue
        new = g.input.add()
        new.CopyFrom(vi)
        for j, d in enumerate(new.type.tensor_type.shape.dim if new.type.HasField("tensor_type") else []):
            if not d.HasField("dim_value") and not d.dim_param:
                d.dim_param = f"_unnamed_{k}_{j}"
    for t in model.graph.initializer:
        if _numel(t.dims) <= _VALUE_LIMIT and t.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
        else:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    g.output.extend(onnx.helper.make_empty_tensor_value_info(o.name) for o in model.graph.output)
    return stub


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _itemsize(elem_type: int) -> int:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except (KeyError, TypeError, ValueError):
        return 4


@dataclass
class Cost:
    """One run's estimate: peak bytes (weights + ARENA_FACTOR x live tensors), work (multiply-adds
    and elements written), output shapes, and how many tensors' shapes inference could not give
    (counted as one element: data-dependent dims)."""

    memory: int
    work: int
    outputs: dict[str, tuple[int, ...]]
    unknown: int


class Budget:
    """Estimates a run of the model at given input shapes from onnx's shape inference (with data
    propagation: sizes computed from ``Shape``) at those shapes, without running it."""

    def __init__(self, model: onnx.ModelProto, max_memory: int = DEFAULT_MAX_MEMORY, max_work: int = MAX_WORK) -> None:
        try:
            self.stub: onnx.ModelProto | None = _stub(model)
        except Exception:  # noqa: BLE001 - a graph protobuf cannot copy: no estimates, the search runs unbudgeted
            self.stub = None
        self.max_memory, self.max_work = max_memory, max_work
        self.weights = sum(_numel(t.dims) * _itemsize(t.data_type) for t in model.graph.initializer)
        self.inits = {t.name for t in model.graph.initializer}
        self.inputs = {vi.name for vi in model.graph.input if vi.name not in self.inits}
        self.outputs = [o.name for o in model.graph.output]
        self.cache: dict[str, Cost | None] = {}

    def cost(self, shapes: Shapes) -> Cost | None:
        key = describe(shapes)
        if self.stub is None:
            return None
        if key not in self.cache:
            try:
                self.cache[key] = self._cost(shapes)
            except Exception:  # noqa: BLE001 - onnx's inference refuses some graphs: no estimate
                self.cache[key] = None
        return self.cache[key]

    def over(self, shapes: Shapes) -> str | None:
        """Why a run at these shapes is over the budget, if it is."""
        c = self.cost(shapes)
        if c is None:
            return None
        if c.memory > self.max_memory:
            return f"an estimated {memory_text(c.memory)} is over the memory budget of {memory_text(self.max_memory)} (--max-memory)"
        if c.work > self.max_work:
            return f"an estimated {c.work:.2g} multiply-adds per run are over the time budget of {self.max_work:.2g}"
        return None

    def tensor_dims(self, shapes: Shapes) -> dict[str, tuple[int, ...]] | None:
        """Every tensor's static dims that shape inference gives at these input shapes: onnx's, or
        onnxruntime's symbolic inference where onnx's loses a resampling op's output (a UNet's time
        embedding, expanded to a data-dependent shape, leaves every block after the first unknown).
        None when neither runs."""
        if self.stub is None:
            return None
        try:
            stub = self._at(shapes)
            inferred = self._inferred(stub)
        except Exception:  # noqa: BLE001 - onnx's inference refuses some graphs
            return None
        found = _static_dims(inferred.graph.value_info)
        if any(n.op_type in _RESAMPLING and n.output[0] not in found for n in stub.graph.node if n.output):
            refined = _symbolic_inference(stub)
            if refined is not None:
                found = _static_dims(refined.known_vi_.values())
        return found

    def _at(self, shapes: Shapes) -> onnx.ModelProto:
        stub = onnx.ModelProto()
        stub.CopyFrom(self.stub)
        for vi in stub.graph.input:
            if vi.name in shapes:
                for d, v in zip(vi.type.tensor_type.shape.dim, shapes[vi.name], strict=True):
                    d.Clear()
                    d.dim_value = int(v)
        return stub

    @staticmethod
    def _inferred(stub: onnx.ModelProto) -> onnx.ModelProto:
        return onnx.shape_inference.infer_shapes(stub, data_prop=True)

    def _cost(self, shapes: Shapes) -> Cost:
        stub = self._at(shapes)
        inferred = self._inferred(stub)
        cost = self._liveness(inferred.graph.node, {vi.name: vi for vi in [*inferred.graph.input, *inferred.graph.value_info]})
        if cost.unknown and cost.memory > self.max_memory // 64:
            # onnx's inference loses sizes computed through Shape->Reshape (attention heads): where
            # that could matter, onnxruntime's symbolic inference (slower, in Python) fills them in
            refined = _symbolic_inference(stub)
            if refined is not None:
                cost = self._liveness(refined.out_mp_.graph.node, refined.known_vi_)
        return cost

    def _liveness(self, nodes, known: dict) -> Cost:
        """Tensors live from their node to their last reader, in graph order (a tensor whose shape
        inference could not give counts as its largest input: elementwise ops, reshapes)."""
        unknown = 0

        def dims(name: str) -> list[int] | None:
            vi = known.get(name)
            tt = vi.type.tensor_type if vi is not None and vi.type.HasField("tensor_type") else None
            if tt is None or not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
                return None
            return [d.dim_value for d in tt.shape.dim]

        def itemsize(name: str) -> int:
            vi = known.get(name)
            return _itemsize(vi.type.tensor_type.elem_type) if vi is not None and vi.type.HasField("tensor_type") else 4

        nodes = list(nodes)
        last: dict[str, int] = {}
        for k, n in enumerate(nodes):
            for i in n.input:
                last[i] = k
        outputs = set(self.outputs)
        sizes: dict[str, int] = {}
        for name, vi in known.items():
            if vi.name in self.inputs:
                sizes[name] = _numel(dims(name) or []) * itemsize(name)
        seen = dict(sizes)
        live = peak = sum(sizes.values())
        work = 0
        for k, n in enumerate(nodes):
            for o in n.output:
                if not o:
                    continue
                d = dims(o)
                if d is None:
                    unknown += 1
                    seen[o] = max((seen.get(i, 0) for i in n.input), default=0)
                else:
                    seen[o] = _numel(d) * itemsize(o)
                sizes[o] = seen[o]
                live += sizes[o]
            peak = max(peak, live)
            if n.output and n.output[0]:
                work += seen[n.output[0]] // itemsize(n.output[0]) * _multiply_adds(n, lambda t: dims(t) or [1])
            for t in {*n.input, *n.output}:
                if t in sizes and last.get(t, k) == k and t not in outputs:
                    live -= sizes.pop(t)
        outs = {o: tuple(dims(o) or ()) for o in self.outputs}
        return Cost(self.weights + ARENA_FACTOR * peak, work, outs, unknown)


#: Ops that change a spatial size (the strides :func:`strides` measures).
_RESAMPLING = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "Resize", "Upsample",
                         "DepthToSpace", "SpaceToDepth"})


def _static_dims(value_infos) -> dict[str, tuple[int, ...]]:
    found = {}
    for vi in value_infos:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            found[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
    return found


def _symbolic_inference(model: onnx.ModelProto):
    """onnxruntime's symbolic shape inference run on ``model`` (None when it cannot: an op it does
    not follow, sympy missing)."""
    try:
        import logging

        import sympy  # noqa: F401 - onnxruntime's inference needs it
        from onnxruntime.tools import symbolic_shape_infer as ssi
    except ImportError:
        return None
    logging.getLogger(ssi.__name__).setLevel(logging.CRITICAL)
    try:
        inference = _inference_class(ssi)(2**31 - 1, True, False, 0)
        inference._preprocess(model)
        while inference.run_:
            inference._infer_impl()
        return inference
    except Exception:  # noqa: BLE001 - a best-effort analysis
        return None


def _inference_class(ssi):
    class Inference(ssi.SymbolicShapeInference):
        """onnxruntime's inference, plus Flatten (its default gives fresh symbols, which loses
        ``attention_mask``'s length on its way to the Gather that bounds it)."""

        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.dispatcher_["Flatten"] = self._infer_flatten

        def _infer_flatten(self, node) -> None:
            shape = self._get_sympy_shape(node, 0)
            axis = ssi.get_attribute(node, "axis", 1)
            axis = axis + len(shape) if axis < 0 else axis
            new = [ssi.sympy_reduce_product(shape[:axis]) if axis else 1, ssi.sympy_reduce_product(shape[axis:])]
            self._update_computed_dims(new)
            vi = self.known_vi_[node.output[0]]
            vi.CopyFrom(onnx.helper.make_tensor_value_info(node.output[0], vi.type.tensor_type.elem_type,
                                                           ssi.get_shape_from_sympy_shape(new)))

    return Inference


def _multiply_adds(node: onnx.NodeProto, dims) -> int:
    """Multiply-adds per output element: a Conv's kernel volume times its input channels per group,
    a MatMul's/Gemm's inner dim; 1 for anything else."""
    try:
        if node.op_type in ("Conv", "ConvTranspose"):
            return max(_numel(dims(node.input[1])[1:]), 1)
        if node.op_type in ("MatMul", "Gemm"):
            a = dims(node.input[0])
            trans = any(at.name == "transA" and at.i for at in node.attribute)
            return max(a[0] if trans and node.op_type == "Gemm" else a[-1], 1)
    except IndexError:
        pass
    return 1


def upsampling(budget: Budget, dims: dict[str, list], role_of: dict[str, str]) -> dict[str, int]:
    """Per image symbol: how many times larger an output dim grows with it (a latent decoder's
    image is 8x its latent), measured by inference at two sizes: the output dims, not their names."""
    images = sorted(s for s, r in role_of.items() if r == "image")
    if not images:
        return {}
    probes = []
    for value in (40, 56):
        env = {s: value if s in images else 1 for s in role_of}
        shapes = _evaluate(dims, env)
        cost = None if shapes is None else budget.cost(shapes)
        if cost is None:
            return {}
        probes.append((value, cost.outputs))
    (v1, o1), (v2, o2) = probes
    factor = 0
    for name, a in o1.items():
        b = o2.get(name, ())
        for x, y in zip(a, b, strict=False):
            if y - x >= 2 * (v2 - v1) and x % v1 == 0 and y % v2 == 0 and x // v1 == y // v2:
                factor = max(factor, x // v1)
    return dict.fromkeys(images, factor) if factor >= 2 else {}


# ---------------------------------------------------------------- relations between differently named dims
#: A dependent symbol is searched for in 1..SCAN_LIMIT (floors and products of the others).
SCAN_LIMIT = 4096
#: Graphs with more nodes than this are not analysed for relations (onnxruntime's symbolic
#: inference runs in Python, about 1 ms a node): their search goes by names and the ladder only.
MAX_ANALYSED_NODES = 20000


def relations(model: onnx.ModelProto) -> tuple[list, list]:
    """(equations, guesses) over the inputs' dim symbols, each an expression equal to 0.

    Equations are what the graph's own shape arithmetic implies, as onnxruntime's symbolic shape
    inference merges dims (a Concat along an axis, a broadcast, a Reshape/Expand target that makes
    two expressions one). Guesses are what an index implies: a Gather/GatherND over a symbolic axis
    with positions numbered by another expression (transformers gather ``attention_mask`` at the
    ``past + new`` key positions: its length is ``past + new``). Both are tried by running, never
    assumed; the graph's outputs are not read (an exporter's output dim names say nothing)."""
    if len(model.graph.node) > MAX_ANALYSED_NODES:
        return [], []
    try:
        inf = _symbolic_inference(_stub(model))
    except Exception:  # noqa: BLE001 - a graph protobuf cannot copy: no relations
        inf = None
    if inf is None:
        return [], []
    import sympy
    from onnxruntime.tools.symbolic_shape_infer import get_attribute, is_literal

    symbols = set(inf.input_symbols_)

    def expr(d):
        if isinstance(d, int) or is_literal(d):
            return int(d)
        return inf.symbolic_dims_.get(d, sympy.Symbol(d, integer=True, positive=True))

    def ours(e) -> bool:  # an expression over the inputs' symbols only
        return not isinstance(e, int) and bool(e.free_symbols) and {s.name for s in e.free_symbols} <= symbols

    def shape(name: str) -> list | None:
        vi = inf.known_vi_.get(name)
        if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else expr(d.dim_param) if d.dim_param else None
                for d in vi.type.tensor_type.shape.dim]
        return None if None in dims else dims

    equations, guesses = [], []
    for k, v in inf.suggested_merge_.items():
        eq = sympy.expand(expr(k) - expr(v))
        if ours(eq) and eq not in equations:
            equations.append(eq)
    for n in inf.out_mp_.graph.node:
        if n.op_type not in ("Gather", "GatherND") or len(n.input) < 2:
            continue
        data, idx = shape(n.input[0]), shape(n.input[1])
        if not data or not idx:
            continue
        if n.op_type == "Gather":
            axis = get_attribute(n, "axis", 0)
            indexed, positions = [data[axis + len(data) if axis < 0 else axis]], idx
        else:
            b = get_attribute(n, "batch_dims", 0)
            if not isinstance(idx[-1], int):
                continue
            indexed, positions = data[b:b + idx[-1]], idx[b:-1]
        indexed = [_divided(d, idx) for d in indexed if ours(d) and not any(d == p for p in idx)]
        positions = [p for p in positions if ours(p) and not any(p == d for d in data)]
        for d, p in zip(reversed(indexed), reversed(positions), strict=False):  # the innermost axes pair up
            eq = sympy.expand(d - p)
            if ours(eq) and eq not in equations and eq not in guesses:
                guesses.append(eq)
    return equations, guesses


def _divided(d, idx: list):
    """A flattened axis (``batch*total``) gathered at per-row positions: the row dims the indices
    carry too (``batch``) divided out."""
    import sympy

    for p in idx:
        if isinstance(p, sympy.Symbol) and p in d.free_symbols:
            q = sympy.cancel(d / p)
            if p not in q.free_symbols and q.is_polynomial():
                d = q
    return d


class System:
    """Equations between dim symbols, each solved for one symbol (the *dependent* one) by scanning
    1..SCAN_LIMIT once the others have values. The dependent symbol is the one the fewest inputs
    carry, a length before a batch, a later input's before an earlier's (``total_sequence``, not
    ``past_sequence`` or ``sequence``); an equation over one symbol defines it only when linear
    (``32*s = 32``), else it is a check (a stride's evenness)."""

    def __init__(self, equations: list, dims: dict[str, list], role_of: dict[str, str], name: str) -> None:
        import sympy

        self.name, self.equations = name, list(equations)
        carried: dict[str, list[tuple[int, int]]] = {}
        for k, row in enumerate(dims.values()):
            for d in row:
                if not isinstance(d, int):
                    for sym in _symbols(d):
                        carried.setdefault(sym, []).append((k, 0))
        self.dependent: dict[str, tuple] = {}  # symbol -> (function, symbols) of its equation
        self.solved: list[tuple[str, object]] = []  # (dependent symbol, its equation)
        self.checks: list[tuple] = []
        for eq in self.equations:
            lone = _lone(eq)
            syms = sorted((s.name for s in eq.free_symbols),
                          key=lambda s: (s not in lone, len(carried.get(s, [])), role_of.get(s) == "batch",
                                         -max((k for k, _ in carried.get(s, [])), default=0), s))
            names = sorted(s.name for s in eq.free_symbols)
            fn = sympy.lambdify([sympy.Symbol(n) for n in names], eq.subs({s: sympy.Symbol(s.name) for s in eq.free_symbols}), modules="math")
            pick = next((s for s in syms if s not in self.dependent and s in carried), None)
            if pick is not None and len(syms) == 1:
                (only,) = eq.free_symbols
                if not eq.is_polynomial(only) or sympy.degree(eq, only) != 1:
                    pick = None
            if pick is None:
                self.checks.append((fn, names))
            else:
                self.dependent[pick] = (fn, names)
                self.solved.append((pick, eq))

    def describe(self) -> str:
        """Each dependent symbol as the equation gives it (``total_sequence = past_sequence + sequence``)."""
        import sympy

        parts = []
        for sym, eq in self.solved:
            target = next(s for s in eq.free_symbols if s.name == sym)
            try:
                (value,) = sympy.solve(eq, target)
                parts.append(f"{sym} = {value}")
            except (ValueError, NotImplementedError, TypeError):
                parts.append(f"{eq} = 0 (solved for {sym})")
        return ", ".join(parts)

    def solve(self, env: dict[str, int]) -> dict[str, int] | None:
        """``env`` (a value for every free symbol) plus the dependent symbols, or None when an
        equation has no solution there."""
        env = dict(env)
        todo = [s for s in self.dependent if s not in env]
        while todo:
            ready = [s for s in todo if all(n == s or n in env for n in self.dependent[s][1])]
            if not ready:
                return None
            for s in ready:
                fn, names = self.dependent[s]
                found = next((v for v in range(1, SCAN_LIMIT + 1) if _zero(fn, names, {**env, s: v})), None)
                if found is None:
                    return None
                env[s] = found
                todo.remove(s)
        for fn, names in self.checks:
            if all(n in env for n in names) and not _zero(fn, names, env):
                return None
        return env


def _lone(eq) -> set[str]:
    """In a linear equation, the symbols alone on their side (``total`` in ``total - past - new``):
    solved for, they come out as a sum of the others, positive where the others are."""
    try:
        if not eq.is_polynomial() or any(eq.as_poly().degree(s) > 1 for s in eq.free_symbols) or len(eq.as_poly().monoms()) > len(eq.free_symbols) + 1:
            return set()
        coeff = {s.name: eq.coeff(s) for s in eq.free_symbols}
    except Exception:  # noqa: BLE001 - sympy's many refusals: no preference
        return set()
    return {s for s, c in coeff.items() if c.is_number and all(o.is_number and (c > 0) != (o > 0) for n, o in coeff.items() if n != s)}


def _zero(fn, names: list[str], env: dict[str, int]) -> bool:
    try:
        return fn(*(env[n] for n in names)) == 0
    except (ZeroDivisionError, ValueError, OverflowError, TypeError):
        return False
