"""The edit state whole-graph caches key on: the edits in progress and a generation counter
bumped whenever an edit starts, ends or is undone.
"""

from __future__ import annotations

_active: list = []  # the Edits in progress, innermost last
#: Bumped whenever an edit starts, ends or is undone: cached whole-graph analyses
#: (:func:`live_nodes`) hold for one value of it.
_generation = [0]


def _edited() -> None:
    _generation[0] += 1
