"""The TensorRT optimization profile the printed ``trtexec``/``polygraphy`` lines carry.

Users paste those lines. Built from the verification shapes alone they were not credible: a
recurrent ``state [2, batch_s, 128]`` got a batch of 16 beside ``input [batch, samples]``'s 1 (an
engine TensorRT refuses to build, or one that cannot take the state the model returns), and
nothing said that ``samples: 16`` or a 2x2 latent were graphfix's guesses, not the sizes the model
is built for. So, per dynamic input dim:

* a static dim is its declared size; a dim the user gave (``--trt-*-shapes``, ``--input-shapes``,
  ``--load-inputs``; a dim name given on one input binds it on every input) is as given;
* any other dim is **guessed**: the sizes verification found to run (min and max over the shape
  sets, opt the first set's), said so on a ``# guessed:`` line with the flags that set it;
* dims that share a name, that the shape search set equal to another (``equals``), or that are a
  batch (a dim named ``*batch*``, or dims in the batch role that every verified set gives one
  size) are *tied*: one (min, opt, max) for all of them, the first declared one's (the first
  input's), so no profile holds two sizes for one dim.

Which dims were guessed comes from the shape search's records where it keeps them
(``report.shapes["guessed"]``: one record per declared dim with the (input, axis) pairs declaring
it, its ``role`` and what it ``equals``); without them (an older search, the shapes of a run that
verified nothing) they are derived here from the model's declared dims and what the user gave
(:func:`guessed_records`): that is the seam.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

Dims = tuple[int, ...]
#: per input: (min, opt, max)
Profile = dict[str, tuple[Dims, Dims, Dims]]


@dataclass
class PrintedProfile:
    shapes: Profile
    #: one record per tied group of guessed dims: {"dim", "inputs": [[input, axis], ...], "min", "opt", "max"}
    guessed: list[dict[str, Any]] = field(default_factory=list)
    #: what the ``# guessed:`` line says (empty when nothing was guessed)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"shapes": {k: {"min": list(a), "opt": list(b), "max": list(c)} for k, (a, b, c) in self.shapes.items()},
                "guessed": self.guessed, "note": self.note}


def declared(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Per graph input with a dynamic dim (initializers aside): each dim as its size, its name, or
    None (unnamed)."""
    inits = {t.name for t in model.graph.initializer}
    out: dict[str, list[int | str | None]] = {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        row = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in vi.type.tensor_type.shape.dim]
        if any(not isinstance(d, int) for d in row):
            out[vi.name] = row
    return out


def _is_batch(name: str | None) -> bool:
    return bool(name) and "batch" in name.lower()


def guessed_records(model: onnx.ModelProto, given: set[str]) -> list[dict[str, Any]]:
    """The shape search's records of the dims it set (``{"dim", "inputs", "role", "equals"}``),
    derived from the declared dims: every dynamic dim of an input not in ``given`` whose name no
    given input declares. Role: batch for a dim named ``*batch*`` or the first of several dims,
    else length."""
    rows = declared(model)
    bound = {d for name in given for d in rows.get(name, []) if isinstance(d, str)}
    records: dict[str, dict[str, Any]] = {}
    for name, row in rows.items():
        if name in given:
            continue
        for j, d in enumerate(row):
            if isinstance(d, int) or d in bound:
                continue
            key = d if d else f"?{name}:{j}"
            rec = records.setdefault(key, {"dim": d or "?", "inputs": [], "equals": None,
                                           "role": "batch" if _is_batch(d) or (j == 0 and len(row) > 1) else "length"})
            rec["inputs"].append([name, j])
    return list(records.values())


def build(model: onnx.ModelProto, shape_sets: list[dict[str, list[int]]], given: Profile | None = None,
          given_inputs: set[str] = frozenset(), records: list[dict[str, Any]] | None = None,
          verified: bool = True) -> PrintedProfile:
    """The printed profile of ``model``'s dynamic inputs.

    ``shape_sets``: the verification shapes (report.shapes["shapes"]); ``given``: the user's
    --trt-min/opt/max-shapes (per input); ``given_inputs``: inputs whose verification shapes the
    user gave (--input-shapes, --load-inputs); ``records``: the shape search's guessed-dim records
    (None: derived, :func:`guessed_records`); ``verified``: whether onnxruntime ran those shapes
    (a run that rewrote nothing only picks them)."""
    given = dict(given or {})
    rows = declared(model)
    user = set(given) | set(given_inputs)
    if records is None:
        records = guessed_records(model, user)
    # per (input, axis): (min, opt, max), from the user's profile, else the verified sets
    per_dim: dict[tuple[str, int], tuple[int, int, int]] = {}
    for name, row in rows.items():
        sets = [tuple(int(v) for v in s[name]) for s in shape_sets if name in s and len(s[name]) == len(row)]
        for j, d in enumerate(row):
            if name in given:
                per_dim[name, j] = (given[name][0][j], given[name][1][j], given[name][2][j])
            elif sets:
                per_dim[name, j] = (min(s[j] for s in sets), sets[0][j], max(s[j] for s in sets))
            elif isinstance(d, int):
                per_dim[name, j] = (d, d, d)
    _bind_given_names(rows, given, per_dim)
    bound = {d for name in user for d in rows.get(name, []) if isinstance(d, str)}
    out_records = []
    for group in _tied(records, shape_sets, rows, user):
        present = [k for k in group if k in per_dim]
        guessed = [(n, j) for n, j in present if n not in user and rows[n][j] not in bound]
        if not guessed:
            continue
        leader = per_dim[next((k for k in present if k not in guessed), guessed[0])]  # the user's size, if one is tied
        for key in guessed:
            per_dim[key] = leader
        names = list(dict.fromkeys(_dim_name(rows, n, j) for n, j in guessed))
        out_records.append({"dim": ", ".join(names), "inputs": [list(k) for k in guessed],
                            "min": leader[0], "opt": leader[1], "max": leader[2]})
    shapes: Profile = {}
    for name, row in rows.items():
        if all((name, j) in per_dim for j in range(len(row))):
            lo, opt, hi = (tuple(per_dim[name, j][k] for j in range(len(row))) for k in range(3))
            shapes[name] = (lo, opt, hi)
    out_records = [r for r in out_records if all(n in shapes for n, _ in r["inputs"])]
    return PrintedProfile(shapes, out_records, _note(out_records, shapes, verified))


def _bind_given_names(rows: dict[str, list], given: Profile, per_dim: dict) -> None:
    """A dim name the user's profile sizes on one input takes those sizes on every input."""
    sizes = {}
    for name in given:
        for j, d in enumerate(rows.get(name, [])):
            if isinstance(d, str):
                sizes.setdefault(d, per_dim[name, j])
    for name, row in rows.items():
        if name in given:
            continue
        for j, d in enumerate(row):
            if isinstance(d, str) and d in sizes:
                per_dim[name, j] = sizes[d]


def _dim_name(rows: dict[str, list], name: str, axis: int) -> str:
    d = rows[name][axis]
    return d if isinstance(d, str) else f"{name} axis {axis}"


def _tied(records: list[dict[str, Any]], shape_sets: list[dict[str, list[int]]], rows: dict[str, list],
          user: set[str]) -> list[list[tuple[str, int]]]:
    """The dims grouped so that each group gets one size: a guessed record's own inputs (one dim
    name), a record and the one it ``equals``, and the batches (named ``*batch*``, or in the batch
    role with one size in every verified set), the user's inputs' batches among them. In declared
    order: the first member leads."""
    records = [*records, *({"dim": d or "?", "inputs": [[n, j]], "role": "batch" if _is_batch(d) or j == 0 else "length"}
                           for n in rows if n in user for j, d in enumerate(rows[n]) if not isinstance(d, int))]
    parent = list(range(len(records)))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def join(a: int, b: int) -> None:
        parent[find(b)] = find(a)

    by_dim = {r["dim"]: k for k, r in enumerate(records) if r.get("dim") not in (None, "?")}
    for k, r in enumerate(records):
        if r.get("equals") in by_dim:
            join(by_dim[r["equals"]], k)
    batches = sorted((k for k, r in enumerate(records) if r.get("role") == "batch" or _is_batch(r.get("dim"))),
                     key=lambda k: _order(rows, records[k]))
    for k in batches[1:]:
        first = batches[0]
        if (_is_batch(records[k].get("dim")) and _is_batch(records[first].get("dim"))) or \
                _values(records[k], shape_sets) == _values(records[first], shape_sets):
            join(first, k)
    groups: dict[int, list[tuple[str, int]]] = {}
    for k in sorted(range(len(records)), key=lambda k: _order(rows, records[k])):
        groups.setdefault(find(k), []).extend((n, int(j)) for n, j in records[k]["inputs"])
    return list(groups.values())


def _order(rows: dict[str, list], record: dict[str, Any]) -> tuple[int, int]:
    """Declared order of a record's first (input, axis)."""
    name, axis = record["inputs"][0]
    return (list(rows).index(name) if name in rows else len(rows), int(axis))


def _values(record: dict[str, Any], shape_sets: list[dict[str, list[int]]]) -> list[int | None]:
    name, axis = record["inputs"][0]
    return [s[name][axis] if name in s and axis < len(s[name]) else None for s in shape_sets]


def _dims(shape: Dims) -> str:
    return "x".join(map(str, shape))


def _note(records: list[dict[str, Any]], shapes: Profile, verified: bool) -> str:
    """The ``# guessed:`` line: which dims, and the flags that set them (the sizes printed, to edit)."""
    if not records:
        return ""
    dims = "; ".join(f"{r['dim']} ({', '.join(f'{n}[{j}]' for n, j in r['inputs'])}: "
                     f"{r['min']}..{r['max']}, opt {r['opt']})" for r in records)
    flags = " ".join(f"--trt-{which}-shapes " + ",".join(f"{n}:{_dims(s[k])}" for n, s in shapes.items())
                     for k, which in enumerate(("min", "opt", "max")))
    how = "the sizes graphfix verified at" if verified else "sizes graphfix picked without running the model there"
    return f"# guessed: {dims}: {how}, not the sizes the model is built for; set yours with {flags}"
