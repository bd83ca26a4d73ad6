"""The report's data: a PassRecord per pass and the Report; the JSON schema version.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from graphfix.onnxio.proto import proto_text

SCHEMA_VERSION = 3

#: Verdicts, in the words the table and the JSON use.
KEPT, UNVERIFIED, UNCHANGED, ROLLED_BACK, ERROR = "kept", "kept-unverified", "unchanged", "rolled-back", "error"


@dataclass
class PassRecord:
    name: str
    verdict: str
    matched: int = 0
    rewritten: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    seconds: float = 0.0
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[dict[str, str]] = field(default_factory=list)
    reason: str = ""
    rolled_back_nodes: int = 0

    @property
    def worst(self) -> tuple[str, float, float] | None:
        if not self.outputs:
            return None
        name = max(self.outputs, key=lambda k: (self.outputs[k]["max_abs"], self.outputs[k]["max_rel"]))
        return name, self.outputs[name]["max_abs"], self.outputs[name]["max_rel"]


@dataclass
class Report:
    input: str | None
    output: str | None
    settings: dict[str, Any]
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    passes: list[PassRecord] = field(default_factory=list)
    sessions: int = 0
    search_sessions: int = 0
    verification: str = ""
    shapes: dict[str, Any] = field(default_factory=dict)
    #: node-level records: one per rewritten region (passes, nodes, outputs, verdict, diagram)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    #: the end-to-end comparison again under the settings users run (onnxruntime's defaults:
    #: "settings", per output "outputs", regions undone for a difference there only "rolled_back")
    users: dict[str, Any] = field(default_factory=dict)
    #: the original model's own noise floor per output (max abs), measured when the strict
    #: end-to-end comparison failed (None: not needed)
    noise_floor: dict[str, float] | None = None
    #: per output computed through float16/bfloat16 (graphfix.verify.precision): that type, whose
    #: rounding its comparison allows for although the output itself may be float32 (None: not
    #: needed, every output agreed at its own type's tolerance)
    precision: dict[str, str] | None = None
    #: decisions (ArgMax/TopK/comparisons) the outputs depend on: margins and flips (graphfix.analysis.discrete)
    discrete: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    trt: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)

    @property
    def blocking_left(self) -> list[dict[str, Any]]:
        """The findings for which the ``--trt`` target still rejects the fixed model (exit 4)."""
        if not self.trt:
            return []
        return [f for f in self.trt["after"]["findings"] if f["severity"] == "blocking"]

    @property
    def status(self) -> str:
        if self.blocking_left:
            return "blocked"
        if any(p.verdict in (ROLLED_BACK, ERROR) or p.rolled_back_nodes for p in self.passes):
            return "rolled-back"
        return "ok"

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data = {"schema": SCHEMA_VERSION, "tool": "graphfix", "status": self.status, **data}
        return _json_safe(data)


def _json_safe(obj: Any) -> Any:
    """JSON has no inf/nan: write them as strings so every JSON reader accepts the report. Nor
    bytes: protobuf gives a dim name that is not UTF-8 as bytes (onnxruntime runs such a model;
    found by the fuzz), written with its bad bytes escaped."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, bytes):
        return proto_text(obj)
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj
