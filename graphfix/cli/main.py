"""``graphfix`` command line: ``graphfix in.onnx out.onnx --passes all`` and subcommands.

Errors the user can fix (bad file, bad option) print one line and exit 2, with no traceback
unless ``--verbose``. Ctrl-C prints ``graphfix: interrupted`` (exit 130), SIGTERM ``graphfix:
terminated`` (exit 143); either way no file is left behind. onnxruntime's and polygraphy's own
log lines and Python warnings are silenced (``--verbose`` shows them): graphfix's one line says
what went wrong.

This module imports only light modules at the top, so that an interrupt during the heavy imports
(onnx, onnxruntime, polygraphy) is already inside :func:`main`'s handlers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import signal
import stat
import sys
from collections.abc import Iterator, Sequence

from graphfix import __version__
from graphfix.cli.commands import COMMANDS
from graphfix.cli.common import EXIT_BROKEN_PIPE, discard_stdout, exit_code, quiet_libraries, stderr_silenced
from graphfix.errors import GraphfixError, cut
from graphfix.fs.signals import deferred_signals, signal_raised, signals_as_exceptions


class _Parser(argparse.ArgumentParser):
    """argparse's errors as graphfix's one line (usage stays in --help)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise GraphfixError(f"{cut(message, 300)} (see '{self.prog} --help')")  # a 5000-digit value stays one short line


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="graphfix",
        description="Rewrite ONNX graphs that TensorRT's ONNX parser rejects, verified against onnxruntime.",
        epilog="'graphfix IN OUT [options]' is short for 'graphfix fix IN OUT [options]'.",
    )
    parser.add_argument("--version", action="version", version=f"graphfix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        try:
            module = importlib.import_module(f"graphfix.cli.{name}")
        except ModuleNotFoundError as exc:  # a subcommand still being written; the rest work
            if exc.name != f"graphfix.cli.{name}":
                raise
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and progress details")
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("-v", "--verbose") for a in args_list)
    signal_raised(reset=True)
    try:
        with signals_as_exceptions(redeliver=False):
            code = _main(args_list, verbose)
    except BaseException as exc:  # noqa: BLE001 - every way out is one line and an exit code
        code = exit_code(exc, verbose)
    if argv is None:  # the process is ours: a late signal must not turn this exit code into a kill
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        _hard_exit(code)
    return code


def _hard_exit(code: int) -> None:
    """End the ``graphfix`` process without tearing down its heap: every file is written and
    renamed by now, and freeing a 100k-node graph object by object took 1.4 s of a 13 s run
    (bench/scale.py). Output streams are flushed first; mypy ends its runs the same way."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:  # check --jobs: release its queues' semaphores, else the resource tracker
        # (which outlives us) warns of them as leaked when a signal ended the run mid-spawn
        with contextlib.suppress(Exception):
            mp_util._run_finalizers(0)
    os._exit(code)


def _main(args_list: list[str], verbose: bool) -> int:
    if args_list and args_list[0] not in COMMANDS and not args_list[0].startswith("-"):
        args_list.insert(0, "fix")
    with deferred_signals(), contextlib.nullcontext() if verbose else stderr_silenced():
        parser = build_parser()  # a signal now is delivered once the imports are done
        _preload()
    args = parser.parse_args(args_list)
    if args.command is None:
        parser.print_help()
        return 2
    with _paced_stdout(args.command != "fix") as paced:  # fix keeps its own code: its files are written
        if args.verbose:
            code = int(args._module.run(args))
        else:
            with quiet_libraries():
                code = int(args._module.run(args))
    return EXIT_BROKEN_PIPE if paced.reader_left else code


class _Paced:
    reader_left = False


#: How long graphfix waits for a pipe's reader to take what was written before ending anyway
#: (``Popen(...).wait()`` before reading must not hang).
_DRAIN_SECONDS = 2.0


@contextlib.contextmanager
def _paced_stdout(wanted: bool) -> Iterator[_Paced]:
    """Standard output to a pipe, written as ``yes | head -1`` would see it: the first line, then
    (once the reader has taken it) the rest, then a wait until the reader has taken that too or
    closed its end. A reader that stops early (``graphfix passes | head -1``) has then always
    closed the pipe on unread output, and the run ends with 141 as a process killed by SIGPIPE
    does; written in one go, the whole text could fit in the pipe and exit 0 or 141 by chance."""
    paced = _Paced()
    try:
        import fcntl  # noqa: F401 - POSIX only: elsewhere the output goes out as it is printed
        import select

        fd = sys.stdout.fileno()
        pipe = wanted and hasattr(select, "poll") and stat.S_ISFIFO(os.fstat(fd).st_mode)
    except (AttributeError, ImportError, OSError, ValueError):  # captured by a test, closed, not a file
        pipe = False
    if not pipe:
        yield paced
        return
    real, encoding, errors = sys.stdout, sys.stdout.encoding, sys.stdout.errors
    real.flush()
    sys.stdout = io.StringIO()
    try:
        yield paced
    except BaseException:  # what was printed before the error still goes out, unpaced
        text, sys.stdout = sys.stdout.getvalue(), real
        with contextlib.suppress(OSError):
            real.write(text)
            real.flush()
        raise
    text, sys.stdout = sys.stdout.getvalue(), real
    data = text.encode(encoding, errors or "strict")
    first = data[: data.find(b"\n") + 1] or data
    for part in (first, data[len(first):]):
        if part and not _write_all(fd, part):
            paced.reader_left = True
            discard_stdout()
            return
    paced.reader_left = _drain(fd) is False


def _write_all(fd: int, data: bytes) -> bool:
    """``data`` into the pipe once its reader has taken what came before; False when the
    reader is gone."""
    if _drain(fd) is False:
        return False
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        return False
    return True


def _drain(fd: int) -> bool | None:
    """True once the reader has read everything in the pipe, False when it closed its end
    first, None when it is still reading after _DRAIN_SECONDS."""
    import array
    import fcntl
    import select
    import termios
    import time

    poll = select.poll()
    poll.register(fd, select.POLLERR)
    unread = array.array("i", [0])
    deadline = time.monotonic() + _DRAIN_SECONDS
    while time.monotonic() < deadline:
        if poll.poll(0):
            return False
        fcntl.ioctl(fd, termios.FIONREAD, unread)
        if unread[0] == 0:
            return True
        if poll.poll(10):
            return False
    return None


def _preload() -> None:
    """Import the native libraries while signals are deferred: a KeyboardInterrupt raised inside a
    C extension's import (onnx's nanobind, onnxruntime's pybind11) aborts or crashes the process
    ("terminate called after throwing nanobind::python_error", SIGSEGV) instead of unwinding."""
    import numpy.random  # noqa: F401 - polygraphy's DataLoader imports it on first use
    import onnx  # noqa: F401
    import onnx_graphsurgeon  # noqa: F401
    import onnxruntime  # noqa: F401
    import polygraphy.backend.onnxrt  # noqa: F401
    import polygraphy.comparator  # noqa: F401
    import polygraphy.json  # noqa: F401


if __name__ == "__main__":
    raise SystemExit(main())
