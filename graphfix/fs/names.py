"""Target checks, temp names beside the target, and removal of the temp files a dead run left.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from graphfix.errors import GraphfixError, first_line


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


def final_mode(target: Path) -> int:
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


def temp_beside(target: Path, what: str, path: str | os.PathLike) -> Path:
    """A new, empty temp file ``.<name>.<pid>.<random>.tmp`` beside ``target``."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{_stem(target.name)}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise GraphfixError(f"cannot write {what} ({first_line(exc)})", str(path)) from exc
    os.close(fd)
    return Path(tmp)


def _quiet(fn: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(OSError):
        fn(*args)
