"""onnx.checker and shape inference of a big graph in graphfix's worker, beside its load and import.

Both are C++ that holds the GIL: on the 100k-node export of bench/scale.py the checker took
0.47 s and inference 0.58 s, one after the other with graphfix's own walk over every node
(0.42 s) and the import (1.2 s of Python). Sent to the worker (graphfix.runtime.worker, which
serves onnxruntime; it imports onnxruntime only for a session) as soon as the graph's declared
shapes are known to be sane, they run on a second core while this process walks the graph and
builds its objects. The verdict is load_model's, and it still comes before anything is
rewritten: the import asks for the inferred types last, and a run that fails before then hears
the checker's complaint first, as it would have at load. The worker isolates the C++ as well:
an abort in onnx's inference is one line, not the end of graphfix.
"""

from __future__ import annotations

import os

import onnx

from graphfix.errors import GraphfixError, OnnxruntimeDied, first_line
from graphfix.onnxio.external import has_external
from graphfix.onnxio.infer import infos_from_bytes, value_infos
from graphfix.onnxio.proto import weightless
from graphfix.onnxio.validate import checker_input, checker_problem, checks_weightless, reject_checker_problem
from graphfix.runtime import worker as runtime_worker

#: Graphs of at least this many nodes are checked in the worker; smaller ones here, at load
#: (starting the worker, ~0.3 s of a core, would cost more than the overlap saves).
OFFLOAD_NODES = 20_000


#: Model files of at least this size start the worker before they are parsed (its start, ~0.3 s,
#: then overlaps the parse instead of the checks; a smaller graph is rarely one to offload).
EARLY_START_BYTES = 64 << 20


def start_early(source: str | None) -> None:
    """Start the worker now for a file big enough that its checks will likely go there (best
    effort: without a worker they run here)."""
    try:
        if source is not None and os.stat(source).st_size >= EARLY_START_BYTES:
            runtime_worker.start(runtime=False)
    except OSError:
        pass


class LoadChecks:
    """onnx.checker's verdict on a model and the model after shape inference: computed here after
    the load (:meth:`loaded`), or, for a big graph when ``offload``, in the worker from
    :meth:`submit` on (load_model's ``early`` hook) until the import asks (:meth:`infos`)."""

    def __init__(self, where: str, offload: bool) -> None:
        self.where, self.offload = where, offload
        self.pending: runtime_worker.Pending | None = None
        self.model: onnx.ModelProto | None = None
        self.work: onnx.ModelProto | None = None
        self.problem: str | None = None
        self.found: dict[str, onnx.ValueInfoProto] | None = None

    def submit(self, model: onnx.ModelProto) -> None:
        if not self.offload or len(model.graph.node) < OFFLOAD_NODES:
            return
        try:
            work = weightless(model)
            checker = (None, True) if checks_weightless(model) and not has_external(model) else checker_input(model)
            work_bytes = work.SerializeToString()
        except Exception:  # noqa: BLE001 - the checker, here, says what is wrong with it
            return
        try:
            self.pending = runtime_worker.check_and_infer(work_bytes, checker)
        except (OSError, OnnxruntimeDied):  # no worker to be had: the checks run here, after the load
            return
        self.model, self.work = model, work

    def loaded(self, model: onnx.ModelProto) -> LoadChecks | None:
        """After ``load_model(..., checker=False)``: the checker's verdict now, unless the worker has it."""
        if self.pending is None:
            reject_checker_problem(model, self.where, checker_problem(model))
            return None
        return self

    def infos(self) -> dict[str, onnx.ValueInfoProto]:
        """What shape inference found (:func:`~graphfix.onnxio.infer.value_infos`; the weightless
        model's own, where inference gave up); raises the checker's complaint first, as load_model would have."""
        self.settle()
        assert self.found is not None
        return self.found

    def settle(self) -> None:
        """Wait for the worker's answer; GraphfixError if the checker rejects the model."""
        assert self.pending is not None and self.model is not None and self.work is not None
        if self.pending.open:
            try:
                self.problem, found = runtime_worker.checked_and_inferred(self.pending)
            except OnnxruntimeDied as exc:  # onnx's C++ gave up the ghost: in the worker only
                raise GraphfixError(f"invalid graph: onnx.checker or shape inference failed on it ({first_line(exc)})",
                                    self.where) from None
            self.found = value_infos(self.work) if found is None else infos_from_bytes(found)
        reject_checker_problem(self.model, self.where, self.problem)

    def after_failure(self, exc: BaseException) -> None:
        """A run failed before the verdict was taken: an error says the checker's complaint if it
        has one (load_model's order); an interrupt does not wait for it."""
        if self.pending is None or not self.pending.open:
            return
        if isinstance(exc, Exception):
            self.settle()
        else:
            self.pending.cancel()

    def cancel(self) -> None:
        """The load failed: its own complaint comes first, the worker's answer is not wanted."""
        if self.pending is not None:
            self.pending.cancel()
