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
import errno
import fcntl
import hashlib
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
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


def resolve_target(path: str | os.PathLike, what: str = "output") -> Path:
    """Writing to a symlink writes the file it points to (as a normal write would); a symlink
    loop is refused (``open`` would fail with ELOOP, a rename would replace the link)."""
    p = Path(path)
    try:
        if not p.is_symlink():
            return p
    except OSError:  # a name too long to exist: writing it fails and says so
        return p
    try:
        return Path(os.path.realpath(p, strict=True))
    except FileNotFoundError:  # a dangling link: the write creates the file it names
        return Path(os.path.realpath(p))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GraphfixError(f"{what} path is a symlink loop", str(p)) from None
        raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(p)) from exc


# ------------------------------------------------------------------------------ names
#: Longest target name (in bytes) used as-is inside graphfix's own file names (temp, backup,
#: lock, interim data); longer ones are cut and given a hash, so every legal name can be written.
_STEM_BYTES = 180


def _stem(name: str) -> str:
    raw = os.fsencode(name)
    if len(raw) <= _STEM_BYTES:
        return name
    digest = hashlib.sha1(raw).hexdigest()[:12]
    return raw[:_STEM_BYTES - 13].decode("utf-8", "ignore") + "~" + digest


def aux_name_bytes(name: str) -> int:
    """Length of the longest name graphfix creates beside a target called ``name`` (its temp
    files: ``.<name>.<pid>.<random>.tmp``), so planning can test it."""
    return len(os.fsencode(_stem(name))) + len(str(os.getpid())) + 15


#: Temp and backup names are ``.<stem>.<pid>.<8 random>.tmp|bak``, interim data ``<stem>.<pid>.<8
#: random>.new``: the pid of a process that is gone marks them stale.
_OWNED = re.compile(r"^(?P<stem>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]{8}\.(?P<kind>tmp|bak|new)$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def remove_stale(target: Path, kinds: tuple[str, ...] = ("tmp", "bak")) -> None:
    """Remove the temp files (and backups) a killed run left beside ``target``: their names carry
    the pid of the run that made them, and that process is gone."""
    stem = _stem(target.name)
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        m = _OWNED.match(name)
        if m and m["kind"] in kinds and m["stem"] == (stem if m["kind"] == "new" else f".{stem}") and not _alive(int(m["pid"])):
            _quiet(os.unlink, target.parent / name)


# ------------------------------------------------------------------------------ fault injection
def _step(what: str) -> None:
    """One step of a commit. Tests make a run stop here: ``GRAPHFIX_TEST_STEPS=FILE`` appends each
    step's number and name to FILE, ``GRAPHFIX_TEST_KILL_AT=k`` SIGKILLs the process before step
    k, ``GRAPHFIX_TEST_PAUSE_AT=k:SECONDS`` sleeps there (a race made wide)."""
    _STEPS[0] += 1
    k = _STEPS[0]
    log = os.environ.get("GRAPHFIX_TEST_STEPS")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{k} {what}\n")
    if os.environ.get("GRAPHFIX_TEST_KILL_AT") == str(k):
        os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get("GRAPHFIX_TEST_PAUSE_AT", "")
    if pause.partition(":")[0] == str(k):
        time.sleep(float(pause.partition(":")[2]))


_STEPS = [0]


# ------------------------------------------------------------------------------ locks
class _Lock:
    """``flock`` on ``.<name>.lock`` beside a target, held for a commit: two runs writing the same
    files install theirs one after the other, never interleaved. The holder removes the lock file
    before releasing it; a waiter that then gets the lock on the removed file tries again."""

    def __init__(self, target: Path) -> None:
        self.path = target.parent / f".{_stem(target.name)}.lock"
        self.fd: int | None = None

    def acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
            try:
                _wait_for(fd)
                held, now = os.fstat(fd), os.stat(self.path)
            except FileNotFoundError:  # removed by the holder we waited for
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                self.fd = fd
                return
            os.close(fd)

    def release(self) -> None:
        if self.fd is not None:
            _quiet(os.unlink, self.path)
            os.close(self.fd)
            self.fd = None


def _wait_for(fd: int) -> None:
    """``flock`` that a signal can end: the commit defers signals, and the run holding the lock may
    take long (a TensorRT build), but nothing is renamed while waiting."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if _SIG.pending is not None:
                signum, _SIG.pending = _SIG.pending, None
                raise_for(signum)
            time.sleep(0.02)


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
            entry = _Staged(target, _temp_beside(target, what, path), what)
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
                entry.temp = _temp_beside(entry.target, entry.what, entry.target)
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
        copy = _temp_beside(data.target, data.what, data.target)
        try:
            _step(f"copy {data.placed.name} to {copy.name}")
            _copy(data.placed, copy)
            os.chmod(copy, _final_mode(data.target))
            _step(f"rename {copy.name} -> {data.target.name}")
            os.replace(copy, data.target)
        except OSError as exc:
            _quiet(os.unlink, copy)
            self.rollback()
            raise GraphfixError(f"cannot write {data.what} ({first_line(exc)})", str(data.target)) from exc
        try:
            os.chmod(model.final, _final_mode(model.target))
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


def writable_target(path: str | os.PathLike, what: str) -> Path:
    """The file a write to ``path`` replaces (symlinks followed): in an existing folder, and a
    regular file or nothing yet. Checked again here, after planning: the writer never replaces
    a directory, FIFO or device."""
    target = resolve_target(path, what)
    if not target.parent.is_dir():
        problem = "does not exist" if not target.parent.exists() else "is not a directory"
        raise GraphfixError(f"{what} directory {target.parent} {problem}", str(path))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(path)) from exc
    if stat.S_ISDIR(st.st_mode):
        raise GraphfixError(f"{what} path is a directory", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise GraphfixError(f"{what} path is not a regular file ({file_kind(st.st_mode)})", str(path))
    return target


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def _temp_beside(target: Path, what: str, path: str | os.PathLike) -> Path:
    """A new, empty temp file ``.<name>.<pid>.<random>.tmp`` beside ``target``."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{_stem(target.name)}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(path)) from exc
    os.close(fd)
    return Path(tmp)


def _fill(temp: Path, data: Data, what: str, path: str | os.PathLike) -> None:
    try:
        with open(temp, "wb") as fh:
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
            shutil.copyfileobj(fin, fout, _CHUNK)
        fout.flush()
        os.fsync(fout.fileno())


def _place(entry: _Staged, where: Path) -> None:
    """Rename the entry's temp file to ``where``, keeping what was there reachable (a hard link)."""
    os.chmod(entry.temp, _final_mode(entry.target))
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
    with transaction() as tx:
        tx.stage(path, data, what)


def reraise_swallowed_signal() -> None:
    """Raise again a signal whose exception a library swallowed (polygraphy's ``LazyModule`` has a
    bare ``except:`` that eats a KeyboardInterrupt raised inside a comparison): called after
    library calls and before any file is committed, so an interrupted run never writes."""
    if _SIG.raised is not None and not _SIG.held:
        raise_for(_SIG.raised)
