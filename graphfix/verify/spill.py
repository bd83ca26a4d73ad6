"""Run outputs kept in a temporary file while nothing compares them.

A run's outputs arrive as views of one shared-memory mapping of the worker's answer
(graphfix.runtime.worker), resident in graphfix's process once read. Verification keeps some runs
for later (the original's outputs from the probe, read again only after an undo; the nudged half
of the noise floor's run), and a 200 MB output held that way beside the two runs being compared
made graphfix's peak 3.4 times the output (issue 33). Spilled, their big arrays are copy-on-write
maps of an unlinked temporary file (``TMPDIR``): read back from it when compared, and let go of by
:func:`release` once compared (clean file pages: the kernel reads them again if they are needed).
Arrays under :data:`SPILL_ABOVE` bytes, strings and sequences are copied in memory, as before.
"""

from __future__ import annotations

import contextlib
import mmap
import tempfile

import numpy as np
from polygraphy.comparator import RunResults

from graphfix.verify.compare import iteration_result

__all__ = ["SPILL_ABOVE", "release", "spilled"]

#: Arrays of at least this many bytes go to the file; smaller ones are copied in memory (a model's
#: thousands of small outputs cost no file writes).
SPILL_ABOVE = 4 << 20
_ALIGN = 64


def _big(value: object) -> bool:
    return isinstance(value, np.ndarray) and not value.dtype.hasobject and value.nbytes >= SPILL_ABOVE


def spilled(results: RunResults, names: list[str] | None = None) -> RunResults:
    """``results`` (only ``names`` of each iteration, when given) as arrays of their own: the big
    ones over one temporary file, written from the arrays as they are (no copy in memory), the rest
    copied. The source run (its mapping) can go once nothing else holds it."""
    layout, end = [], 0
    for _, its in results:
        for it in its:
            for name in (it if names is None else [n for n in names if n in it]):
                if _big(it[name]):
                    end = -(-end // _ALIGN) * _ALIGN
                    layout.append((id(it[name]), end))
                    end += it[name].nbytes
    offsets = dict(layout)
    mm = _written(results, offsets, end) if end else None
    if mm is None:
        offsets = {}  # no file to be had (TMPDIR full or read-only): copies in memory, as before

    def own(value: object) -> object:
        if id(value) in offsets:
            return np.ndarray(value.shape, value.dtype, buffer=mm, offset=offsets[id(value)])
        return np.array(value) if isinstance(value, np.ndarray) else value

    return RunResults([(runner, [iteration_result({k: own(it[k]) for k in (it if names is None else names) if k in it},
                                                  it.runtime, it.runner_name) for it in its]) for runner, its in results])


def _written(results: RunResults, offsets: dict[int, int], end: int) -> mmap.mmap | None:
    """The arrays at ``offsets`` written to an unlinked temporary file, mapped copy-on-write (the
    mapping keeps the file); None where the file cannot be written."""
    try:
        with tempfile.TemporaryFile(prefix="graphfix-outputs-") as f:
            for _, its in results:
                for it in its:
                    for value in it.values():
                        if id(value) in offsets:
                            f.seek(offsets[id(value)])
                            f.write(np.ascontiguousarray(value).reshape(-1).view(np.uint8))
            f.flush()
            f.truncate(end)
            return mmap.mmap(f.fileno(), end, access=mmap.ACCESS_COPY)
    except OSError:
        return None


def release(results: RunResults | None) -> None:
    """The spilled arrays' pages leave graphfix's process (they stay in the file, and come back
    when read); arrays in memory are untouched. Only for runs nothing writes to: a copy-on-write
    page written to would be dropped."""
    if results is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    seen: set[int] = set()
    for _, its in results:
        for it in its:
            for value in it.values():
                base = value.base if isinstance(value, np.ndarray) else None
                if isinstance(base, mmap.mmap) and id(base) not in seen:
                    seen.add(id(base))
                    with contextlib.suppress(OSError, ValueError):
                        base.madvise(mmap.MADV_DONTNEED)
