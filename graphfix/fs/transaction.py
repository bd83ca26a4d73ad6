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
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from graphfix.errors import GraphfixError, first_line
from graphfix.fs.faults import _step
from graphfix.fs.locks import _Lock
from graphfix.fs.names import _quiet, final_mode, remove_stale, resolve_target, temp_beside, writable_target
from graphfix.fs.signals import deferred_signals, drop_pending_signal, signals_as_exceptions

#: What a stage writes: bytes, or a function that writes into the open temp file (big blobs).
Data = bytes | bytearray | memoryview | Callable[[BinaryIO], None]
#: Bytes copied at a time (external data, staged files): one chunk in memory, not a whole weight.
COPY_CHUNK = 1 << 24


# ------------------------------------------------------------------------------ transaction
@dataclass
class _Staged:
    target: Path
    temp: Path
    what: str
    #: Where the staged bytes are visible now (the target, or a data file's interim name).
    placed: Path | None = None
    backup: Path | None = None
    existed: bool = False
    #: A model's external-data file (another entry) and the model's bytes naming another location.
    data: _Staged | None = None
    naming: Callable[[str], Data] | None = None
    #: The model as it must end (naming the data file's own name) while an interim one is in place.
    final: Path | None = None


_ACTIVE: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("graphfix_transaction", default=None)


class Transaction:
    """All-or-nothing over several files: ``stage`` each, the renames happen on ``commit`` (or on
    leaving the ``with`` block without an exception); any exception rolls everything back.

    ``commit`` may be called early (a TensorRT build needs the model on disk); a later failure
    still removes what was created and restores what was replaced.

    A model and its external-data file are installed so that, whenever the process dies, the model
    on disk reads its own weights: the data file goes in first; if a file of that name is already
    there (the previous model's weights), the new weights go in under an interim name the new
    model names, and only when the transaction is over are they copied to their own name (a reflink
    where the filesystem can) and the model replaced once more (each step a rename, the model
    last), the interim file removed. The targets are locked (:class:`_Lock`) from the commit to
    the end.
    """

    def __init__(self, lock: Iterable[str | os.PathLike] = ()) -> None:
        self.staged: list[_Staged] = []
        self._signals: contextlib.ExitStack | None = None
        self._lock_also = [Path(p) for p in lock]
        self._locks: dict[Path, _Lock] = {}

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
                self._finish()
            else:
                self.rollback()
        except BaseException as err:  # the signal handling must see what ended the block
            signals.__exit__(type(err), err, err.__traceback__)
            raise
        signals.__exit__(exc_type, exc, tb)

    # -- staging
    def stage(self, path: str | os.PathLike, data: Data, what: str = "output", *,
              data_file: _Staged | None = None, naming: Callable[[str], Data] | None = None) -> _Staged:
        """Write ``data`` to a temp file beside ``path``. A model that references the external-data
        file staged as ``data_file`` gives ``naming(location)``: its bytes naming another location."""
        entry = self.reserve(path, what)
        entry.data, entry.naming = data_file, naming
        _fill(entry.temp, data, what, path)
        return entry

    def reserve(self, path: str | os.PathLike, what: str = "output") -> _Staged:
        """An empty temp file beside ``path`` for a writer that needs a path (TensorRT's engine)."""
        target = writable_target(path, what)
        remove_stale(target)
        with deferred_signals():  # the temp file is known to the transaction the moment it exists
            entry = _Staged(target, temp_beside(target, what, path), what)
            self.staged.append(entry)
        return entry

    # -- commit / finish / rollback
    def commit(self) -> None:
        """Put every staged file in place (signals deferred until all are in place)."""
        with deferred_signals():
            self._lock({e.target for e in self.staged} | set(self._lock_also))
            owned = {id(e.data) for e in self.staged if e.data is not None}
            for entry in self.staged:
                if entry.placed is None and id(entry) not in owned:
                    try:
                        self._install(entry)
                    except OSError as exc:
                        raise GraphfixError(f"cannot write {entry.what} ({first_line(exc)})", str(entry.target)) from exc
            _sync_dirs({e.target.parent for e in self.staged})

    def _install(self, entry: _Staged) -> None:
        data = entry.data
        if data is not None and data.placed is None:
            if os.path.lexists(data.target):  # the model in place may read it: the new weights go beside
                interim = data.temp.with_name(data.temp.name[1:-len(".tmp")] + ".new")
                entry.final = entry.temp
                entry.temp = temp_beside(entry.target, entry.what, entry.target)
                assert entry.naming is not None
                _fill(entry.temp, entry.naming(os.path.relpath(interim, entry.target.parent)), entry.what, entry.target)
                _place(data, interim)
            else:
                _place(data, data.target)
        _place(entry, entry.target)

    def _finish(self) -> None:
        """The transaction is over: weights copied from their interim name to their own, each model
        that named the interim replaced by the one naming that, backups removed, locks released."""
        with deferred_signals():
            try:
                for entry in self.staged:
                    if entry.final is not None:
                        self._settle(entry)
                for entry in self.staged:
                    if entry.backup is not None:
                        _step(f"remove backup of {entry.target.name}")
                        _quiet(os.unlink, entry.backup)
                for target in {e.data.target for e in self.staged if e.data is not None}:
                    remove_stale(target, ("new",))  # interim weights of killed runs: no model names them now
                _sync_dirs({e.target.parent for e in self.staged})
            finally:
                self.staged.clear()
                self._unlock()

    def _settle(self, model: _Staged) -> None:
        """Weights from their interim name to their own, then the model naming that. A copy, not a
        hard link: onnx refuses to read a data file with two links ("hardlink attack"). Until the
        copy is in place nothing was replaced, so a failure rolls the transaction back."""
        data = model.data
        assert data is not None and data.placed is not None and model.final is not None
        copy = temp_beside(data.target, data.what, data.target)
        try:
            _step(f"copy {data.placed.name} to {copy.name}")
            _copy(data.placed, copy)
            os.chmod(copy, final_mode(data.target))
            _step(f"rename {copy.name} -> {data.target.name}")
            os.replace(copy, data.target)
        except OSError as exc:
            _quiet(os.unlink, copy)
            self.rollback()
            raise GraphfixError(f"cannot write {data.what} ({first_line(exc)})", str(data.target)) from exc
        try:
            os.chmod(model.final, final_mode(model.target))
            _step(f"rename {model.final.name} -> {model.target.name}")
            os.replace(model.final, model.target)
            model.final = None
            _step(f"remove {data.placed.name}")
            os.unlink(data.placed)
        except OSError as exc:  # consistent still: the model in place names weights that are there
            raise GraphfixError(f"cannot finish writing {model.what} ({first_line(exc)}); it reads its weights from "
                                f"{data.placed.name}", str(model.target)) from exc

    def rollback(self) -> None:
        """Remove temp files and created files; put replaced files back (models first: a restored
        model reads the weights it read before)."""
        with deferred_signals():
            for entry in reversed(self.staged):
                if entry.placed is not None:
                    if entry.backup is not None:
                        _quiet(os.replace, entry.backup, entry.placed)
                    elif not entry.existed:
                        _quiet(os.unlink, entry.placed)
                else:
                    _quiet(os.unlink, entry.temp)
                if entry.final is not None:
                    _quiet(os.unlink, entry.final)
            self.staged.clear()
            self._unlock()
            drop_pending_signal()  # the exception being handled already says what happened

    # -- locks
    def _lock(self, targets: Iterable[Path]) -> None:
        """Lock every target not locked yet, in one global order (two runs cannot deadlock)."""
        for target in sorted({resolve_target(t) for t in targets} - set(self._locks), key=str):
            lock = _Lock(target)
            try:
                lock.acquire()
            except OSError as exc:
                raise GraphfixError(f"cannot lock {lock.path.name} ({first_line(exc)})", str(target)) from exc
            self._locks[target] = lock

    def _unlock(self) -> None:
        for lock in self._locks.values():
            lock.release()
        self._locks.clear()


def _fill(temp: Path, data: Data, what: str, path: str | os.PathLike) -> None:
    try:
        with open(temp, "wb") as raw, _SyncingWriter(raw) as fh:
            if callable(data):
                data(fh)
            else:
                view = memoryview(data)
                for start in range(0, len(view), COPY_CHUNK):
                    fh.write(view[start:start + COPY_CHUNK])
            fh.sync()
    except OSError as exc:
        raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(path)) from exc


#: Bytes written between two background syncs of a file being filled.
SYNC_EVERY = 64 << 20


class _SyncingWriter:
    """A file being written that reaches the disk as it grows: every :data:`SYNC_EVERY` bytes a
    thread syncs what is written so far (``fdatasync`` holds no GIL), so the ``fsync`` before the
    rename waits for the last part only, not for the whole file after the last byte (a 396 MB
    model: 0.2 s of waiting, bench/scale.py)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.written, self.synced = fh, 0, 0
        self.thread: threading.Thread | None = None
        self.error: OSError | None = None

    def __enter__(self) -> _SyncingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._join()  # before the file is closed under it

    def __getattr__(self, name: str):  # tell(), fileno(), ... of the file itself
        return getattr(self.fh, name)

    def write(self, data) -> int:
        n = self.fh.write(data)
        self.written += n
        if self.written - self.synced >= SYNC_EVERY:
            self.fh.flush()
            self._join()
            self.synced = self.written
            self.thread = threading.Thread(target=self._sync, name="graphfix-sync", daemon=True)
            self.thread.start()
        return n

    def _sync(self) -> None:
        try:
            os.fdatasync(self.fh.fileno())
        except OSError as exc:
            self.error = exc

    def _join(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            raise self.error

    def sync(self) -> None:
        """Everything written on the disk (raises what a background sync met)."""
        self.fh.flush()
        self._join()
        os.fsync(self.fh.fileno())


def _copy(src: Path, dst: Path) -> None:
    """``dst`` as a copy of ``src``, made by the kernel (a reflink where the filesystem shares
    blocks, such as btrfs or xfs), synced."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        left = os.fstat(fin.fileno()).st_size
        try:
            while left > 0:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), left)
                if n == 0:
                    break
                left -= n
        except OSError:  # not across these filesystems: copy the rest through Python
            shutil.copyfileobj(fin, fout, COPY_CHUNK)
        fout.flush()
        os.fsync(fout.fileno())


def _place(entry: _Staged, where: Path) -> None:
    """Rename the entry's temp file to ``where``, keeping what was there reachable (a hard link)."""
    os.chmod(entry.temp, final_mode(entry.target))
    entry.existed = os.path.lexists(where)
    if entry.existed:
        backup = entry.temp.with_name(entry.temp.name[:-len(".tmp")] + ".bak")
        _step(f"back up {where.name}")
        try:
            os.link(where, backup)
            entry.backup = backup
        except OSError:
            entry.backup = None
    _step(f"rename {entry.temp.name} -> {where.name}")
    os.replace(entry.temp, where)
    entry.placed = where


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
    with transaction() as tx:
        tx.stage(path, data, what)
