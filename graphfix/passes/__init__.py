"""The pass registry: every module in this package that defines ``PASS`` is a pass.

Adding a pass is adding a module; the pipeline order is each pass's ``order``.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from functools import cache

from graphfix.errors import GraphfixError
from graphfix.passes.base import Context, Finding, Pass, PassResult, Skip

__all__ = ["Context", "Finding", "Pass", "PassResult", "Skip", "all_passes", "get", "select"]


@cache
def all_passes() -> tuple[Pass, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        p = getattr(module, "PASS", None)
        if isinstance(p, Pass):
            found.append(p)
    names = [p.name for p in found]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise RuntimeError(f"duplicate pass names: {sorted(dupes)}")
    return tuple(sorted(found, key=lambda p: (p.order, p.name)))


def get(name: str) -> Pass:
    for p in all_passes():
        if p.name == name:
            return p
    names = [p.name for p in all_passes()]
    spelled = name.strip().lower().replace("_", "-")  # a module name or a shouting shell script
    close = [spelled] if spelled in names else difflib.get_close_matches(spelled, names, n=2, cutoff=0.6)
    hint = f"did you mean {' or '.join(map(repr, close))}?" if close else f"'graphfix passes' lists the {len(names)} passes"
    raise GraphfixError(f"unknown pass {name!r}; {hint}")


def select(passes: str | list[str] | tuple[str, ...] = "all", skip: list[str] | tuple[str, ...] = ()) -> list[Pass]:
    """Resolve a user's pass list (``"all"``, ``"a,b"`` or a list) into pipeline order."""
    names = [n.strip() for n in passes.split(",") if n.strip()] if isinstance(passes, str) else list(passes)
    chosen = list(all_passes()) if names in (["all"], []) else [get(n) for n in names]
    skipped = {get(n).name for n in skip}
    chosen_names = {p.name for p in chosen} - skipped
    return [p for p in all_passes() if p.name in chosen_names]
