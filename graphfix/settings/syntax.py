"""The syntax of shape and range options (``x:1x3x224x224``, ``x:[0,1]``), parsed for the CLI
and the API alike.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from graphfix.errors import GraphfixError
from graphfix.settings.checks import MAX_DIM

# ------------------------------------------------------------------ user options
_SHAPE = re.compile(r"^(?P<name>.+):(?P<dims>\d+(?:x\d+)*|\[\s*\d*(?:\s*,\s*\d+)*\s*\])$")
_RANGE = re.compile(r"^(?P<name>.+):\[\s*(?P<lo>[-+0-9.eE]+)\s*,\s*(?P<hi>[-+0-9.eE]+)\s*\]$")


def parse_input_shapes(items: list[str] | None, option: str | None = None) -> dict[str, tuple[int, ...]]:
    """trtexec style: ``name:1x3x224x224`` (``name:[1,3,224,224]`` also accepted); several
    separated by commas or given as several arguments. With ``option`` (one shape per input:
    ``--fix-shapes``, ``--trt-min-shapes``), an input named twice is refused rather than the last
    silently kept."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in _split_items(items):
        m = _SHAPE.match(item)
        if not m:
            raise GraphfixError(f"bad --input-shapes entry {item!r}: expected name:1x3x224x224")
        dims = m.group("dims").strip("[]")
        sep = "x" if "x" in dims or "," not in dims else ","
        parts = [d.strip() for d in dims.split(sep) if d.strip()]
        big = next((d for d in parts if len(d.lstrip("0")) > len(str(MAX_DIM)) or int(d) > MAX_DIM), None)
        if big is not None:  # checked as text first: int() of 5000 digits is itself an error
            shown = big if len(big) <= 24 else f"{big[:12]}…({len(big)} digits)"
            raise GraphfixError(f"shape entry {m.group('name')!r}: dim {shown} is out of range; a dim is at most {MAX_DIM} "
                                "(TensorRT's dims are int32)")
        name, dims = m.group("name"), tuple(int(d) for d in parts)
        if option is not None and name in shapes:
            raise GraphfixError(f"{option} names {name!r} twice ({_dims(shapes[name])} and {_dims(dims)}): give one shape per input")
        shapes[name] = dims
    return shapes


def _dims(dims: tuple[int, ...]) -> str:
    return "x".join(map(str, dims)) or "scalar"


def parse_shape_sets(items: list[str] | None) -> list[dict[str, tuple[int, ...]]]:
    """Repeated ``--input-shapes``: an occurrence that names an input again starts another shape set
    (each set is verified); occurrences naming different inputs add to the same set."""
    sets: list[dict[str, tuple[int, ...]]] = []
    for item in items or []:
        shapes = parse_input_shapes([item])
        if not sets or set(shapes) & set(sets[-1]):
            sets.append({})
        sets[-1].update(shapes)
    return sets


def parse_val_ranges(items: list[str] | None) -> dict[str, tuple[float, float]]:
    """polygraphy style: ``name:[lo,hi]``."""
    ranges: dict[str, tuple[float, float]] = {}
    for item in items or []:
        m = _RANGE.match(item.strip())
        if not m:
            raise GraphfixError(f"bad --val-range entry {item!r}: expected name:[lo,hi]")
        lo, hi = float(m.group("lo")), float(m.group("hi"))
        if lo > hi:
            raise GraphfixError(f"bad --val-range entry {item!r}: lo > hi")
        if m.group("name") in ranges:
            raise GraphfixError(f"--val-range names {m.group('name')!r} twice: give one range per input")
        ranges[m.group("name")] = (lo, hi)
    return ranges


def pass_names(given: str | Sequence[str]) -> tuple[str, ...]:
    """``--skip``/``--force`` (repeatable, each comma-separated) and the API's ``skip=``/``force=``
    (a comma-separated string or a list): the names, in order."""
    items = [given] if isinstance(given, str) else given
    return tuple(n.strip() for item in items for n in item.split(",") if n.strip())


def parse_set_inputs(items: list[str] | None) -> dict[str, str]:
    """``--set-input NAME=VALUE`` (repeatable): the values as text, typed against the model's
    inputs once it is loaded (graphfix.pipeline.set_inputs.values)."""
    given: dict[str, str] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise GraphfixError(f"bad --set-input entry {item!r}: expected NAME=VALUE (sr=16000, use_cache_branch=false, t=[1,2])")
        if name.strip() in given:
            raise GraphfixError(f"--set-input names {name.strip()!r} twice")
        given[name.strip()] = value.strip()
    return given


def _split_items(items: list[str] | None) -> list[str]:
    out: list[str] = []
    for item in items or []:
        # "a:1x3,b:2x2" but not "a:[1,3]"
        out.extend(p.strip() for p in re.split(r",(?![^\[]*\])", item) if p.strip())
    return out
