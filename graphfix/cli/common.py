"""Exit codes and one-line errors the subcommands share, and quieting the libraries' own output.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
from collections.abc import Iterator

from graphfix.errors import GraphfixError, OnnxruntimeDied, first_line, visible
from graphfix.fs.signals import Terminated, signal_raised

#: Exit codes: 0 done, 1 --strict failure / check found blocking nodes, 2 bad input,
#: 3 a bug in graphfix (one line; --verbose shows the traceback), 4 written but the --trt target
#: still rejects it (graphfix/cli/fix.py says why), 130 SIGINT, 143 SIGTERM, 141 the reader
#: of the output went away (``graphfix passes | head -1``; as SIGPIPE would).
EXIT_BUG, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_BROKEN_PIPE = 3, 130, 143, 141


def exit_code(exc: BaseException, verbose: bool) -> int:
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
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        # ENOMEM: the kernel refused a map or a process (the worker, a spilled run) under a memory cap
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


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
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
