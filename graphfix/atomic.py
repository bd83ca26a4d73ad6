"""The one writer: every file graphfix creates goes through :func:`write_atomic`.

A write stages a temp file in the target's folder (same filesystem, so the final rename is
atomic), fsyncs it, gives it the mode a normal ``open(path, "w")`` would (the umask for a new
file, the old mode for a replaced one) and renames it into place.

Several files that belong together (model, external data, report, polygraphy sidecars) are one
:class:`Transaction`: everything is staged first and renamed at the end, so a failure (disk
full, a signal, an exception anywhere) leaves no file that was not there before and every
replaced file as it was. Inside a transaction ``write_atomic`` stages instead of renaming, so
code that writes through it (``save_model``, ``report.write``) joins without knowing.

Signals: SIGINT raises KeyboardInterrupt and SIGTERM raises :class:`Terminated` while a write is
under way, so temp files are removed on the way out; during the renames both are deferred (a
rename sequence is never cut in half).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from graphfix.errors import GraphfixError

#: What a stage writes: bytes, or a function that writes into the open temp file (big blobs).
Data = bytes | bytearray | memoryview | Callable[[BinaryIO], None]
_CHUNK = 1 << 24


class Terminated(BaseException):
    """SIGTERM arrived while graphfix was working (the CLI exits 143 after cleaning up)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


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


def drop_pending_signal() -> None:
    _SIG.pending = None


# ------------------------------------------------------------------------------ modes
def current_umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _final_mode(target: Path) -> int:
    """What ``open(target, "w")`` would leave: the old mode if the file exists, else the umask's."""
    try:
        st = os.stat(target)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~current_umask()


def resolve_target(path: str | os.PathLike) -> Path:
    """Writing to a symlink writes the file it points to (as a normal write would)."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


# ------------------------------------------------------------------------------ transaction
@dataclass
class _Staged:
    target: Path
    temp: Path
    what: str
    backup: Path | None = None
    existed: bool = False
    committed: bool = False


_ACTIVE: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("graphfix_transaction", default=None)


class Transaction:
    """All-or-nothing over several files: ``stage`` each, the renames happen on ``commit`` (or on
    leaving the ``with`` block without an exception); any exception rolls everything back.

    ``commit`` may be called early (a TensorRT build needs the model on disk); a later failure
    still removes what was created and restores what was replaced.
    """

    def __init__(self) -> None:
        self.staged: list[_Staged] = []
        self._signals: contextlib.ExitStack | None = None

    # -- context manager
    def __enter__(self) -> Transaction:
        self._signals = contextlib.ExitStack()
        self._signals.enter_context(signals_as_exceptions())
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _ACTIVE.reset(self._token)
        signals, self._signals = self._signals, None
        assert signals is not None
        try:
            if exc_type is None:
                try:
                    self.commit()
                except BaseException:
                    self.rollback()
                    raise
                self._forget_backups()
            else:
                self.rollback()
        except BaseException as err:  # the signal handling must see what ended the block
            signals.__exit__(type(err), err, err.__traceback__)
            raise
        signals.__exit__(exc_type, exc, tb)

    # -- staging
    def stage(self, path: str | os.PathLike, data: Data, what: str = "output") -> Path:
        """Write ``data`` to a temp file beside ``path``; returns the temp path."""
        entry = self.reserve(path, what)
        try:
            with open(entry.temp, "wb") as fh:
                if callable(data):
                    data(fh)
                else:
                    view = memoryview(data)
                    for start in range(0, len(view), _CHUNK):
                        fh.write(view[start:start + _CHUNK])
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(path)) from exc
        return entry.temp

    def reserve(self, path: str | os.PathLike, what: str = "output") -> _Staged:
        """An empty temp file beside ``path`` for a writer that needs a path (TensorRT's engine)."""
        target = resolve_target(path)
        if target.is_dir():
            raise GraphfixError(f"{what} path is a directory", str(path))
        with deferred_signals():  # the temp file is known to the transaction the moment it exists
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            except OSError as exc:
                raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(path)) from exc
            os.close(fd)
            entry = _Staged(target, Path(tmp), what)
            self.staged.append(entry)
        return entry

    # -- commit / rollback
    def commit(self) -> None:
        """Rename every staged file into place (signals deferred until all are in place)."""
        with deferred_signals():
            for entry in self.staged:
                if entry.committed:
                    continue
                try:
                    self._install(entry)
                except OSError as exc:
                    raise GraphfixError(f"cannot write {entry.what} ({first_line(exc)})", str(entry.target)) from exc
            _sync_dirs({e.target.parent for e in self.staged})

    def _install(self, entry: _Staged) -> None:
        os.chmod(entry.temp, _final_mode(entry.target))
        entry.existed = entry.target.exists()
        if entry.existed:  # keep the old file reachable until the transaction is over
            backup = entry.temp.with_name(entry.temp.name[:-4] + ".bak")
            try:
                os.link(entry.target, backup)
                entry.backup = backup
            except OSError:
                entry.backup = None
        os.replace(entry.temp, entry.target)
        entry.committed = True

    def rollback(self) -> None:
        """Remove temp files and created files; put replaced files back."""
        with deferred_signals():
            for entry in reversed(self.staged):
                if entry.committed:
                    if entry.backup is not None:
                        _quiet(os.replace, entry.backup, entry.target)
                    elif not entry.existed:
                        _quiet(os.unlink, entry.target)
                else:
                    _quiet(os.unlink, entry.temp)
            self.staged.clear()
            drop_pending_signal()  # the exception being handled already says what happened

    def _forget_backups(self) -> None:
        for entry in self.staged:
            if entry.backup is not None:
                _quiet(os.unlink, entry.backup)
        self.staged.clear()


def _quiet(fn: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(OSError):
        fn(*args)


def _sync_dirs(dirs: set[Path]) -> None:
    """The renames themselves reach the disk (best effort; not every filesystem allows it)."""
    for d in dirs:
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def active() -> Transaction | None:
    return _ACTIVE.get()


@contextlib.contextmanager
def transaction() -> Iterator[Transaction]:
    """The running transaction, or a new one: nested writers join the outermost."""
    tx = _ACTIVE.get()
    if tx is not None:
        yield tx
        return
    with Transaction() as tx:
        yield tx


def write_atomic(path: str | os.PathLike, data: Data, what: str = "output") -> None:
    """Write a file atomically; inside a :class:`Transaction` it is staged with the others."""
    p = Path(path)
    target = resolve_target(p)
    if not target.parent.is_dir():
        raise GraphfixError(f"{what} directory {target.parent} does not exist", str(p))
    if target.is_dir():
        raise GraphfixError(f"{what} path is a directory", str(p))
    with transaction() as tx:
        tx.stage(p, data, what)


def reraise_swallowed_signal() -> None:
    """Raise again a signal whose exception a library swallowed (polygraphy's ``LazyModule`` has a
    bare ``except:`` that eats a KeyboardInterrupt raised inside a comparison): called after
    library calls and before any file is committed, so an interrupted run never writes."""
    if _SIG.raised is not None and not _SIG.held:
        raise_for(_SIG.raised)
