"""One parser rule no graphfix pass rewrites (:class:`Restriction`): what `graphfix check` needs
to report it, kept apart from the rules themselves so that each family of rules (Q/DQ and If in
``restrictions``, Loop and Scan in ``loops``) has a module of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import onnx_graphsurgeon as gs

from graphfix.passes.base import WRONG_RESULTS, Context
from graphfix.trt.versions import VersionRange


@dataclass(frozen=True)
class Restriction:
    """One parser rule with no rewrite: ``detect`` gives the finding's message when the node
    breaks it (None when it does not)."""

    name: str
    ops: frozenset[str]
    kind: str
    versions: str
    detect: Callable[[gs.Node, Context], str | None]
    evidence: str
    upstream: str
    error: str | None = None
    #: The rule is about the node's input types (check's generic type warning is then left out).
    types: bool = False
    #: Quote the errors.json example of ``error`` that holds this text.
    prefer: str | None = None
    #: False where the finding depends on values known only at run time (reported as uncertain).
    certain: bool = True

    @cached_property
    def range(self) -> VersionRange:
        return VersionRange(self.versions)

    @property
    def blocking(self) -> bool:
        """The parser refuses (wrong-results rules: it builds, and computes something else)."""
        return self.kind != WRONG_RESULTS
