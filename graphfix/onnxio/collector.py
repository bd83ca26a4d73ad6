"""Garbage collection paused around the steps that make many objects and free few.

Loading's walk, the import, each pass and the export each allocate a Python object or more per
node; a collection during them scans what they made only to find it alive (bench/scale.py, 100k
nodes: 0.7 s in the import, 0.14 s in the passes, 0.09 s in the load walk and the export).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_off(freeze: bool = False) -> Iterator[None]:
    """No garbage collection inside. ``freeze``: what exists when the block ends is frozen
    (``gc.freeze()``; the caller unfreezes), so later collections do not rescan it either. A
    caller's disabled collector stays off, and then nothing is frozen."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        gc.enable()
