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
from graphfix.atomic import Terminated, deferred_signals, first_line, signal_raised, signals_as_exceptions
from graphfix.commands import COMMANDS
from graphfix.errors import GraphfixError, OnnxruntimeDied, cut, visible

#: Exit codes: 0 done, 1 --strict failure / check found blocking nodes, 2 bad input,
#: 3 a bug in graphfix (one line; --verbose shows the traceback), 4 written but the --trt target
#: still rejects it (graphfix/commands/fix.py says why), 130 SIGINT, 143 SIGTERM, 141 the reader
#: of the output went away (``graphfix passes | head -1``; as SIGPIPE would).
EXIT_BUG, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_BROKEN_PIPE = 3, 130, 143, 141


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
            module = importlib.import_module(f"graphfix.commands.{name}")
        except ModuleNotFoundError as exc:  # a subcommand still being written; the rest work
            if exc.name != f"graphfix.commands.{name}":
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
        code = _exit(exc, verbose)
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


def _exit(exc: BaseException, verbose: bool) -> int:
    """The one line and the exit code for an exception that ended the run."""
    if isinstance(exc, SystemExit):  # --help / --version
        return exc.code if isinstance(exc.code, int) else 0
    received = signal_raised()  # a library may have wrapped the KeyboardInterrupt/Terminated
    if received is not None or isinstance(exc, KeyboardInterrupt | Terminated):
        if received == signal.SIGTERM or isinstance(exc, Terminated):
            return _say("graphfix: terminated", EXIT_TERMINATED)
        return _say("graphfix: interrupted", EXIT_INTERRUPTED)
    if isinstance(exc, BrokenPipeError):  # the reader has what it wanted: a normal end, no message
        discard_stdout()
        return EXIT_BROKEN_PIPE
    if isinstance(exc, OnnxruntimeDied) and not verbose:  # a crash or endless run in the worker process
        return _say(f"graphfix: error: {exc}", exc.exit_code)
    if verbose or not isinstance(exc, Exception):
        raise exc
    if isinstance(exc, GraphfixError):
        return _say(f"graphfix: error: {exc}", exc.exit_code)
    if isinstance(exc, MemoryError):
        return _say("graphfix: error: out of memory (the model or its inputs are too large for this machine)", 2)
    return _say(f"graphfix: internal error: {type(exc).__name__}: {first_line(exc)} "
                "(a bug in graphfix; --verbose shows the traceback)", EXIT_BUG)


def discard_stdout() -> None:
    """Standard output to /dev/null once its reader has closed the pipe (the buffered rest would
    fail again at the final flush)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _say(line: str, code: int) -> int:
    """One line, whatever the message quotes (a tensor name may hold a newline or an escape)."""
    line = visible(line)
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr)
    return code


def _main(args_list: list[str], verbose: bool) -> int:
    if args_list and args_list[0] not in COMMANDS and not args_list[0].startswith("-"):
        args_list.insert(0, "fix")
    with deferred_signals(), contextlib.nullcontext() if verbose else _stderr_silenced():
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


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 on /dev/null: onnxruntime's C++ code logs at import, before its logger
    can be configured ("Failed to persist telemetry device ID" when HOME is not writable). A
    failed import still raises, and graphfix reports that in its one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """onnxruntime's coloured C++ log, polygraphy's ``[!]``/``[W]`` lines, onnx-graphsurgeon's
    ``[W]``/``[E]`` lines (printed on stdout, mixed with the table) and Python warnings do not
    reach the terminal: graphfix reports failures itself, in one line."""
    import logging
    import warnings

    import onnxruntime
    from onnx_graphsurgeon.logger import G_LOGGER as GS_LOGGER
    from polygraphy.logger import G_LOGGER

    onnxruntime.set_default_logger_severity(4)  # FATAL only
    py_logger = logging.getLogger("Polygraphy")
    saved = (G_LOGGER.use_python_logging_system, G_LOGGER.colors, py_logger.propagate, list(py_logger.handlers),
             GS_LOGGER.severity)
    G_LOGGER.use_python_logging_system, G_LOGGER.colors = True, False
    py_logger.propagate = False
    py_logger.handlers = [logging.NullHandler()]
    GS_LOGGER.severity = GS_LOGGER.CRITICAL + 1  # its critical() raises; the rest is noise here
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        G_LOGGER.use_python_logging_system, G_LOGGER.colors = saved[0], saved[1]
        py_logger.propagate, py_logger.handlers = saved[2], saved[3]
        GS_LOGGER.severity = saved[4]


if __name__ == "__main__":
    raise SystemExit(main())
