"""flock locks on a target, so two runs writing the same file commit one after the other.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from graphfix.fs.names import _quiet, _stem
from graphfix.fs.signals import _SIG, raise_for


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
