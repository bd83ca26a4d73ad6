"""SIGINT/SIGTERM as exceptions at safe points: an interrupted run leaves no half-written file
and exits 130/143.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Terminated(BaseException):
    """SIGTERM arrived while graphfix was working (the CLI exits 143 after cleaning up)."""


# ------------------------------------------------------------------------------ signals
class _Signals:
    """SIGINT/SIGTERM as exceptions, with a deferral counter for critical sections."""

    def __init__(self) -> None:
        self.installed = 0
        self.previous: dict[int, object] = {}
        self.defer = 0
        self.pending: int | None = None
        self.held = False
        self.raised: int | None = None  # the signal last turned into an exception

    def handler(self, signum: int, frame: object) -> None:
        if self.defer:
            self.pending = self.pending or signum
            return
        raise_for(signum)


_SIG = _Signals()
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def raise_for(signum: int) -> None:
    _SIG.raised = signum  # libraries may wrap the exception (numpy's import -> ImportError)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def signals_as_exceptions(redeliver: bool = True) -> Iterator[None]:
    """While inside: SIGINT -> KeyboardInterrupt, SIGTERM -> Terminated, so ``finally`` blocks
    clean up (nestable; main thread only, elsewhere a no-op). On leaving the outermost one the
    previous handlers come back and, with ``redeliver``, a signal that interrupted the block is
    sent again to them (a library caller's own SIGTERM handling, or the default: terminate).
    The CLI passes ``redeliver=False``: it reports the signal itself and exits 130/143."""
    if not _main_thread():
        yield
        return
    outermost = _SIG.installed == 0
    if outermost:
        for s in _SIGNALS:
            _SIG.previous[s] = signal.getsignal(s)
            signal.signal(s, _SIG.handler)
        _SIG.raised = None
    _SIG.installed += 1
    interrupted = False
    try:
        yield
    except (KeyboardInterrupt, Terminated):
        interrupted = True
        raise
    finally:
        _SIG.installed -= 1
        if outermost:
            for s in _SIGNALS:
                signal.signal(s, _SIG.previous.pop(s))  # type: ignore[arg-type]
            pending, held = _SIG.pending, _SIG.held
            _SIG.defer, _SIG.pending, _SIG.held = 0, None, False
            if redeliver and not held:
                again = _SIG.raised if interrupted else pending
                if again is not None:
                    signal.raise_signal(again)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """A critical section: a signal arriving inside is delivered when the section ends."""
    _SIG.defer += 1
    try:
        yield
    finally:
        _SIG.defer -= 1
        if _SIG.defer == 0 and _SIG.pending is not None:
            pending, _SIG.pending = _SIG.pending, None
            raise_for(pending)


def signal_raised(reset: bool = False) -> int | None:
    """The signal whose exception is unwinding (whatever a library turned it into)."""
    signum = _SIG.raised
    if reset:
        _SIG.raised = None
    return signum


def hold_signals() -> None:
    """From now until :func:`signals_as_exceptions` exits, SIGINT/SIGTERM are ignored: the run is
    committing its files and finishes cleanly (the CLI calls this before its last renames)."""
    if _SIG.installed and not _SIG.held:
        _SIG.held = True
        _SIG.defer += 1


def release_signals() -> None:
    """Undo :func:`hold_signals` once the files are committed: a batch (``--out-dir``) has finished
    one model and a signal held meanwhile now ends the run before the next model starts."""
    if _SIG.held:
        _SIG.held = False
        _SIG.defer -= 1
        if _SIG.defer == 0 and _SIG.pending is not None:
            pending, _SIG.pending = _SIG.pending, None
            raise_for(pending)


def drop_pending_signal() -> None:
    _SIG.pending = None


def reraise_swallowed_signal() -> None:
    """Raise again a signal whose exception a library swallowed (polygraphy's ``LazyModule`` has a
    bare ``except:`` that eats a KeyboardInterrupt raised inside a comparison): called after
    library calls and before any file is committed, so an interrupted run never writes."""
    if _SIG.raised is not None and not _SIG.held:
        raise_for(_SIG.raised)
