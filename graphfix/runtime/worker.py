"""onnxruntime in a child process that graphfix supervises.

onnxruntime's C++ code can take the whole process down or never come back: an Einsum whose
second input is the empty name and whose first has a symbolic dim (opset 13) segfaults
onnxruntime 1.32 while it makes the session, and a Loop with a trip count of 1e12 and a constant
true condition runs for hours inside one ``run`` call, where Python's signal handlers never get a
turn (Ctrl-C and SIGTERM were ignored until SIGKILL). So every session verification, the shape
search, the noise floor and ``--simplify`` open lives in one worker process:

* a crash (any signal) is :class:`OnnxruntimeDied`, one line naming what onnxruntime died of
  (exit 2); a step that outlasts the time budget (:data:`DEFAULT_TIMEOUT`, ``--timeout``) is
  killed and said the same way; both end the run (retrying would crash or hang again);
* the parent waits in ``poll``, so SIGINT/SIGTERM are handled at once: the child is killed and
  the run ends with 130/143, writing nothing. The child is in its own session (the terminal's
  Ctrl-C and a ``kill`` of graphfix's process group reach graphfix, which decides) and dies with
  its parent (``PR_SET_PDEATHSIG``);
* tensors cross the boundary through anonymous shared memory (``memfd_create``), passed as file
  descriptors: feeds, outputs and a model's big inline weights are copied once, into the shared
  pages, and the other side maps them (onnxruntime reads the weights in place, as OrtValues over
  the mapping). External data is read by onnxruntime from the model's folder, as before;
* a run may grow the worker's data by the memory budget (:func:`memory_budget`, ``--max-memory``)
  and no more (``RLIMIT_DATA``, set around each run): a blow-up the estimate could not size (an
  Expand to a shape computed from ``Shape(x) * K``) fails onnxruntime's allocation, and the run ends
  in one line naming the budget, before the machine runs out of memory.

The worker starts on the first session (``graphfix.fix`` starts it while it loads the model)
and serves every later one (starting it costs an onnxruntime import, ~0.3 s); one that died or
was killed is replaced on the next session. Requests are serialized (one at a time, whichever
thread asks). ``GRAPHFIX_WORKER_STDERR=1`` lets the worker's stderr through (onnxruntime's own
log, for debugging).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import mmap
import os
import pickle
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["OnnxruntimeDied", "Pending", "RemoteSession", "RuntimeFailure", "check_and_infer", "checked_and_inferred", "describing",
           "memory_budget", "open_session", "simplify", "time_budget"]

import numpy as np

from graphfix.errors import GraphfixError, OnnxruntimeDied, OverMemoryBudget
from graphfix.onnxio import infer as infer_mod
from graphfix.onnxio import validate
from graphfix.settings.checks import memory_text

#: Seconds one onnxruntime step (making a session, one run on one input set, onnxsim's whole
#: simplification) may take before graphfix stops it: 30 times the slowest step measured on the
#: bench models (10.8 s to make the 100k-node model's session).
DEFAULT_TIMEOUT = 300.0
#: The largest ``--timeout`` accepted (one day).
MAX_TIMEOUT = 86400.0

_BUDGET: contextvars.ContextVar[float] = contextvars.ContextVar("graphfix_runtime_budget", default=DEFAULT_TIMEOUT)
_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("graphfix_runtime_label", default="the model")
_MEMORY: contextvars.ContextVar[int | None] = contextvars.ContextVar("graphfix_runtime_memory", default=None)
_ALIGN = 64
_HEADER = struct.Struct("!Q")
_MAX_FDS = 4


class RuntimeFailure(Exception):
    """onnxruntime (or onnxsim) raised an error in the worker: its message, as it would have read
    in-process (``[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ...``)."""


def check_timeout(value: float) -> float:
    """``--timeout``: a number of seconds in (0, MAX_TIMEOUT]."""
    try:
        ok = math.isfinite(value) and 0 < value <= MAX_TIMEOUT
    except TypeError:
        ok = False
    if not ok:
        raise GraphfixError(f"--timeout {value}: must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}")
    return float(value)


@contextlib.contextmanager
def describing(label: str) -> Iterator[None]:
    """Sessions opened inside are named so in a crash's or a timeout's line ("the fixed model")."""
    token = _LABEL.set(label)
    try:
        yield
    finally:
        _LABEL.reset(token)


@contextlib.contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Inside: each onnxruntime step may take ``seconds`` (None: :data:`DEFAULT_TIMEOUT`)."""
    token = _BUDGET.set(DEFAULT_TIMEOUT if seconds is None else check_timeout(seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


@contextlib.contextmanager
def memory_budget(max_bytes: int | None) -> Iterator[None]:
    """Inside: each onnxruntime run may grow the worker's data by ``max_bytes`` (None: no bound)."""
    token = _MEMORY.set(max_bytes)
    try:
        yield
    finally:
        _MEMORY.reset(token)


def over_budget(what: str, max_bytes: int) -> OverMemoryBudget:
    """The one line a run that outgrew the memory budget ends with."""
    return OverMemoryBudget(f"onnxruntime needed more than the memory budget of {memory_text(max_bytes)} {what}; "
                           "--max-memory SIZE raises it, --input-shapes sets smaller shapes")


# ---------------------------------------------------------------------------- messages
def _send(sock: socket.socket, message: Any, fds: Sequence[int] = ()) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = _HEADER.pack(len(payload)) + payload
    sent = socket.send_fds(sock, [data[:_HEADER.size]], list(fds))  # the descriptors ride on the header
    sock.sendall(data[sent:])


def _recv_exactly(sock: socket.socket, n: int, wait=None) -> bytes:
    chunks, left = [], n
    while left:
        if wait is not None:
            wait()
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, wait=None) -> tuple[Any, list[int]]:
    if wait is not None:
        wait()
    head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, _MAX_FDS)
    if not head:
        raise EOFError
    head += _recv_exactly(sock, _HEADER.size - len(head), wait)
    return pickle.loads(_recv_exactly(sock, _HEADER.unpack(head)[0], wait)), fds


# ---------------------------------------------------------------------------- shared tensors
def _anonymous_file(size: int) -> int:
    """A descriptor of ``size`` bytes of shared memory no path names (gone when both sides close it)."""
    try:
        fd = os.memfd_create("graphfix-tensors", os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # no memfd: an unlinked temp file
        handle, name = tempfile.mkstemp(prefix="graphfix-tensors-")
        os.unlink(name)
        fd = handle
    os.ftruncate(fd, size)
    return fd


Packed = tuple[int | None, list[tuple[str, str, tuple[int, ...], int]], dict[str, Any]]


def pack(arrays: Sequence[tuple[str, Any]]) -> Packed:
    """Arrays into one shared-memory descriptor (one copy): (fd or None, [(name, dtype, shape,
    offset)], everything that is not a plain array, pickled with the message: strings, sequences)."""
    layout, inline, end = [], {}, 0
    for name, value in arrays:
        if isinstance(value, np.ndarray) and not value.dtype.hasobject:
            if value.nbytes == 0:
                layout.append((name, value.dtype.str, tuple(value.shape), 0))
                continue
            end = -(-end // _ALIGN) * _ALIGN
            layout.append((name, value.dtype.str, tuple(value.shape), end))
            end += value.nbytes
        else:
            inline[name] = value
    if end == 0:
        return None, layout, inline
    fd = _anonymous_file(end)
    with mmap.mmap(fd, end) as mm:
        by_name = dict(arrays)
        for name, dtype, shape, offset in layout:
            if not by_name[name].nbytes:
                continue
            view = np.ndarray(shape, np.dtype(dtype), buffer=mm, offset=offset)
            view[...] = by_name[name]
            del view
    return fd, layout, inline


def unpack(fd: int | None, layout: list, inline: dict[str, Any], order: Sequence[str] | None = None) -> dict[str, Any]:
    """The arrays of :func:`pack`, over a private (copy-on-write) mapping of the descriptor, which
    is closed: the mapping lives as long as an array over it."""
    out: dict[str, Any] = {}
    if fd is not None:
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    for name, dtype, shape, offset in layout:
        empty = 0 in shape
        out[name] = np.empty(shape, np.dtype(dtype)) if empty else np.ndarray(shape, np.dtype(dtype), buffer=mm, offset=offset)
    out.update(inline)
    return out if order is None else {k: out[k] for k in order}


# ---------------------------------------------------------------------------- the parent's side
class _Worker:
    """One child process serving sessions; requests one at a time, each bounded by the budget."""

    def __init__(self, runtime: bool = False) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        root = str(Path(__file__).resolve().parent.parent)
        code = f"import sys; sys.path.insert(0, {root!r}); from graphfix.runtime.worker import serve; serve()"
        # PR_SET_PDEATHSIG fires when the creating *thread* ends: only the main thread asks for it
        with_thread = "0" if threading.current_thread() is threading.main_thread() else "1"
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, str(theirs.fileno()), str(os.getpid()), with_thread, "1" if runtime else "0"],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=None if os.environ.get("GRAPHFIX_WORKER_STDERR") else subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        finally:
            theirs.close()
        self.sock, self.pid = ours, os.getpid()
        self.closing: list[int] = []
        self.lock = threading.Lock()  # one request at a time, whichever thread asks
        self.pending: Pending | None = None

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def request(self, message: dict, fds: Sequence[int], what: str) -> tuple[Any, list[int]]:
        """Send, wait for the answer within the budget; a dead or late worker ends the run."""
        if self.pending is not None and self.pending.open and self.pending.thread == threading.get_ident():
            # this thread's earlier request holds the worker until its answer is taken: waiting would hang
            raise RuntimeError(f"{what}: the worker's answer to an earlier request was not taken yet")
        with self.lock:
            return self._exchange(message, fds, what)()

    def submit(self, message: dict, fds: Sequence[int], what: str) -> Pending:
        """Send now, take the answer later (:class:`Pending`); the worker serves nobody else meanwhile."""
        self.lock.acquire()
        try:
            self.pending = Pending(self, self._exchange(message, fds, what))
            return self.pending
        except BaseException:
            self.lock.release()
            raise

    def _exchange(self, message: dict, fds: Sequence[int], what: str) -> Callable[[], tuple[Any, list[int]]]:
        """Send ``message``; the function returned waits for its answer (the budget counts from now)."""
        budget = _BUDGET.get()
        deadline = time.monotonic() + budget
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)

        def wait() -> None:
            while not poller.poll(max(0, min(1000, int((deadline - time.monotonic()) * 1000) + 1))):
                if time.monotonic() >= deadline:
                    self.kill()
                    raise OnnxruntimeDied(f"onnxruntime did not finish {what} within {budget:g} s "
                                          "(the time budget; --timeout SECONDS sets it)")

        def died() -> OnnxruntimeDied:
            return OnnxruntimeDied(f"onnxruntime {self._death()} {what}")

        if self.closing:
            message = {**message, "close": self.closing}
            self.closing = []
        try:
            _send(self.sock, message, fds)
        except (EOFError, ConnectionError):
            self.kill()
            raise died() from None
        except BaseException:
            self.kill()  # interrupted: its state is unknown
            raise

        def answer() -> tuple[Any, list[int]]:
            ok = False
            try:
                reply, got = _recv(self.sock, wait)
                ok = True
            except (EOFError, ConnectionError):
                raise died() from None
            finally:
                if not ok:  # interrupted, timed out or dead: its state is unknown
                    self.kill()
            if "error" in reply:
                for fd in got:
                    os.close(fd)
                if reply.get("over_budget"):
                    raise over_budget(what, reply["over_budget"])
                raise RuntimeFailure(reply["error"])
            return reply, got

        return answer

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "stopped answering"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"died of {name} ({signal.strsignal(-code) or 'killed'})"
        return f"exited with status {code}"

    def kill(self) -> None:
        global _WORKER
        if self.pid == os.getpid():
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            self.sock.close()
        if _WORKER is self:
            _WORKER = None


class Pending:
    """A request sent to the worker whose answer is taken later: :meth:`result` once, or
    :meth:`cancel` (the worker is killed: it may be busy for long, and its answer would be read
    by the next request); until then no other request is served."""

    def __init__(self, worker: _Worker, answer: Callable[[], tuple[Any, list[int]]]) -> None:
        self.worker, self.answer, self.open = worker, answer, True
        self.thread = threading.get_ident()  # other threads wait for the worker, as for any request

    def result(self) -> tuple[Any, list[int]]:
        if not self.open:
            raise RuntimeError("the answer was taken or cancelled")
        try:
            return self.answer()
        finally:
            self._close()

    def cancel(self) -> None:
        if self.open:
            self.worker.kill()
            self._close()

    def _close(self) -> None:
        self.open = False
        self.worker.lock.release()


_WORKER: _Worker | None = None


def _worker(runtime: bool = False) -> _Worker:
    global _WORKER
    if _WORKER is None or not _WORKER.alive():
        if _WORKER is not None and _WORKER.pid == os.getpid():
            _WORKER.kill()
        _WORKER = _Worker(runtime)
    return _WORKER


def start(runtime: bool = True) -> None:
    """Start the worker now, if none is running. ``runtime``: it imports onnxruntime at once, while
    the caller works on (sessions will follow); else on its first session (a worker that only takes
    a big graph's checks never needs it)."""
    _worker(runtime)


def shutdown() -> None:
    """End the worker (tests; the CLI's process simply exits and the worker follows)."""
    if _WORKER is not None:
        _WORKER.kill()


class RemoteSession:
    """An onnxruntime session in the worker, used like one: ``run(None, feed)`` gives the outputs."""

    def __init__(self, worker: _Worker, sid: int, outputs: list[str], label: str) -> None:
        self.worker, self.sid, self.output_names, self.label = worker, sid, outputs, label
        self.last_runtime = 0.0

    def run(self, output_names: Sequence[str] | None, feed: dict[str, Any]) -> list[Any]:
        names = list(output_names or self.output_names)
        return list(self.run_named(feed, names).values())

    def run_named(self, feed: dict[str, Any], names: Sequence[str] | None = None) -> dict[str, Any]:
        """The outputs by name, over shared memory (one copy on each side of the boundary)."""
        if not self.worker.alive():
            raise OnnxruntimeDied("onnxruntime's worker is gone (an earlier crash or interrupt)")
        fd, layout, inline = pack([(k, np.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in feed.items()])
        try:
            reply, fds = self.worker.request({"op": "run", "id": self.sid, "names": names, "layout": layout, "inline": inline,
                                              "memory": _MEMORY.get()},
                                             [] if fd is None else [fd], f"running {self.label}")
        finally:
            if fd is not None:
                os.close(fd)
        self.last_runtime = reply["runtime"]
        return unpack(fds[0] if fds else None, reply["layout"], reply["inline"], reply["names"])

    def close(self) -> None:
        """Free the session in the worker now (its weights' shared memory with it)."""
        if self.sid is not None and self.worker.alive():
            pending = self.worker.pending
            if pending is not None and pending.open and pending.thread == threading.get_ident():  # said with the next request
                self.worker.closing.append(self.sid)
                self.sid = None
                return
            with self.worker.lock, contextlib.suppress(OSError):
                _send(self.worker.sock, {"op": "close", "close": [self.sid]})
        self.sid = None

    def __del__(self) -> None:
        # no message from here: a collection can run while a request is half sent
        if getattr(self, "sid", None) is not None and self.worker.alive():
            self.worker.closing.append(self.sid)


def open_session(stub: bytes, names: list[str], arrays: list[np.ndarray], base_dir: str | None,
                 tuned: bool) -> RemoteSession:
    """A session in the worker for a serialized model whose big weights are ``arrays`` (handed to
    onnxruntime as OrtValues over shared memory) and whose external data lives in ``base_dir``."""
    worker, label = _worker(), _LABEL.get()
    model_fd, _, _ = pack([("model", np.frombuffer(stub, np.uint8))])
    weights_fd, layout, _ = pack(list(zip(names, arrays, strict=True)))
    fds = [model_fd] + ([] if weights_fd is None else [weights_fd])
    try:
        reply, _ = worker.request({"op": "session", "layout": layout, "base_dir": base_dir, "tuned": tuned},
                                  fds, f"making a session for {label}")
    finally:
        for fd in fds:
            os.close(fd)
    return RemoteSession(worker, reply["id"], reply["outputs"], label)


def check_and_infer(weightless_bytes: bytes, checker: tuple[bytes | None, bool]) -> Pending:
    """Shape inference of ``weightless_bytes`` and onnx.checker on ``checker`` (the bytes and mode of
    graphfix.onnxio.validate.checker_input; None: derived from the weightless model's), sent to the
    worker now; :func:`checked_and_inferred` takes the answer."""
    data, from_file = checker
    fds = [pack([("model", np.frombuffer(b, np.uint8))])[0] for b in (weightless_bytes, data) if b is not None]
    try:
        return _worker().submit({"op": "check_infer", "from_file": from_file}, fds,
                                "checking the model (onnx.checker and shape inference)")
    finally:
        for fd in fds:
            os.close(fd)


def checked_and_inferred(pending: Pending) -> tuple[str | None, bytes | None]:
    """The answer of :func:`check_and_infer`: the checker's complaint (None: none) and what inference
    found (graphfix.onnxio.infer.infos_to_bytes; None: inference gave up)."""
    reply, fds = pending.result()
    return reply["problem"], (_map_bytes(fds[0]) if reply["inferred"] else None)


def simplify(model_bytes: bytes) -> bytes:
    """onnxsim's simplification of a serialized model, in the worker (onnxsim runs onnxruntime to
    fold constants). RuntimeFailure: onnxsim raised."""
    fd, _, _ = pack([("model", np.frombuffer(model_bytes, np.uint8))])
    try:
        _, fds = _worker().request({"op": "simplify"}, [fd], "simplifying the model (onnxsim)")
    finally:
        os.close(fd)
    try:
        with mmap.mmap(fds[0], 0, prot=mmap.PROT_READ) as mm:
            return bytes(mm)
    finally:
        os.close(fds[0])


# ---------------------------------------------------------------------------- the worker's side
def _die_with_parent(parent: int, from_thread: bool) -> None:
    """End when the parent dies (a SIGKILLed graphfix leaves no onnxruntime computing): SIGKILL
    from the kernel (PR_SET_PDEATHSIG, when a main thread started this process), and a watchdog
    thread that looks every half second (onnxruntime releases the GIL while it computes)."""
    if not from_thread:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _map_bytes(fd: int) -> bytes:
    try:
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            return bytes(mm)
    finally:
        os.close(fd)


def _data_bytes() -> int | None:
    """The worker's data segment now (VmData: what ``RLIMIT_DATA`` bounds), None where unknown."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    except (OSError, StopIteration, ValueError):
        return None


@contextlib.contextmanager
def _data_limit(budget: int | None) -> Iterator[None]:
    """Inside: the data segment may grow by ``budget`` bytes (the weights and sessions already
    mapped do not count); an allocation beyond fails, in onnxruntime as in numpy."""
    now = _data_bytes() if budget is not None else None
    if now is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = min([now + budget, *(v for v in (soft, hard) if v != resource.RLIM_INFINITY)])  # never above the user's own
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _allocation_failed(exc: Exception) -> bool:
    """onnxruntime's (or numpy's) way of saying an allocation failed."""
    text = str(exc)
    return isinstance(exc, MemoryError) or any(s in text for s in ("Failed to allocate memory", "bad_alloc", "bad allocation"))


class _Server:
    def __init__(self) -> None:
        self._ort: Any = None
        self.sessions: dict[int, tuple[Any, Any]] = {}
        self.next_id = 0

    @property
    def ort(self) -> Any:
        """onnxruntime, imported by the first session (a worker that only checks never needs it)."""
        if self._ort is None:
            import onnxruntime as ort

            ort.set_default_logger_severity(4)
            self._ort = ort
        return self._ort

    def session(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        ort = self.ort
        stub = _map_bytes(fds[0])
        weights = unpack(fds[1] if len(fds) > 1 else None, msg["layout"], {})
        options = ort.SessionOptions()
        options.log_severity_level = 4
        # No arena: its regions double and, near RLIMIT_DATA, back off to whatever the limit leaves,
        # so the next plain allocation fails; a model well inside --max-memory was refused on a
        # machine with more threads. Without it the budget measures the model's tensors (run time
        # within 5% on the largest real fixtures).
        options.enable_cpu_mem_arena = False
        if msg["tuned"]:  # see graphfix.onnxio.external.session
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            options.enable_mem_pattern = False
        if msg["base_dir"] is not None:
            options.add_session_config_entry("session.model_external_initializers_file_folder_path", msg["base_dir"])
        values = [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()]
        if values:
            options.add_external_initializers(list(weights), values)
        made = ort.InferenceSession(stub, options, providers=["CPUExecutionProvider"])
        self.next_id += 1
        self.sessions[self.next_id] = (made, (values, weights))  # read in place: alive with the session
        return {"id": self.next_id, "outputs": [o.name for o in made.get_outputs()]}, []

    def run(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        made = self.sessions[msg["id"]][0]
        feed = unpack(fds[0] if fds else None, msg["layout"], msg["inline"])
        names = msg["names"] or [o.name for o in made.get_outputs()]
        budget = msg.get("memory")
        start = time.perf_counter()
        try:
            with _data_limit(budget):
                outputs = made.run(names, feed)
        except Exception as exc:
            if budget is not None and _allocation_failed(exc):
                return {"error": str(exc).strip(), "over_budget": budget}, []
            raise
        runtime = time.perf_counter() - start
        del feed
        fd, layout, inline = pack(list(zip(names, outputs, strict=True)))
        return {"runtime": runtime, "names": names, "layout": layout, "inline": inline}, [] if fd is None else [fd]

    def simplify(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        import onnx
        import onnxsim

        model = onnx.load_from_string(_map_bytes(fds[0]))
        simplified, _ = onnxsim.simplify(model, check_n=0)
        fd, _, _ = pack([("model", np.frombuffer(simplified.SerializeToString(), np.uint8))])
        return {}, [fd]

    def check_infer(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]]:
        """onnx.checker's verdict and shape inference of a big graph, while the parent imports it."""
        work = _map_bytes(fds[0])
        checker = _map_bytes(fds[1]) if len(fds) > 1 else validate.checker_input_of_weightless(work)
        problem = validate.checked_bytes_problem(checker, msg["from_file"])
        found = infer_mod.inferred(work)
        if found is None:
            return {"problem": problem, "inferred": False}, []
        infos = infer_mod.infos_to_bytes(infer_mod.value_infos(found))
        fd, _, _ = pack([("model", np.frombuffer(infos, np.uint8))])
        return {"problem": problem, "inferred": True}, [fd]

    def handle(self, msg: dict, fds: list[int]) -> tuple[dict, list[int]] | None:
        for sid in msg.get("close", ()):
            self.sessions.pop(sid, None)
        return None if msg["op"] == "close" else getattr(self, msg["op"])(msg, fds)


def serve() -> None:
    """The worker's loop (``sys.argv``: the socket's descriptor, the parent's pid, whether a thread
    started it, whether to import onnxruntime now)."""
    sock_fd, parent = int(sys.argv[1]), int(sys.argv[2])
    _die_with_parent(parent, sys.argv[3] == "1")
    for s in (signal.SIGINT, signal.SIGTERM):  # the parent decides; it kills this process
        signal.signal(s, signal.SIG_IGN)
    sock = socket.socket(fileno=sock_fd)
    server = _Server()
    if sys.argv[4] == "1":
        server.ort  # noqa: B018 - imported now, while the parent loads the model
    while True:
        try:
            msg, fds = _recv(sock)
        except (EOFError, ConnectionError):
            os._exit(0)
        try:
            answer = server.handle(msg, fds)
        except Exception as exc:  # noqa: BLE001 - onnxruntime's errors are many types: the parent says them
            answer = {"error": str(exc).strip() or type(exc).__name__}, []
        if answer is None:  # closing a session: no answer
            continue
        reply, out = answer
        try:
            _send(sock, reply, out)
        except (BrokenPipeError, ConnectionError):
            os._exit(0)
        finally:
            for fd in out:
                os.close(fd)
