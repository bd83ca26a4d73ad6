"""TensorRT release numbers and version ranges such as ``">=7.0,<8.2"``.

Release keys in the support data look like ``8.4.3``, ``8.2-EA`` or ``7.2-ngc21.05``: an early
access release sorts before its GA, an NGC container branch after it.
"""

from __future__ import annotations

import re
from functools import total_ordering

_VERSION = re.compile(r"^\s*(\d{1,9})(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?(?:\.\d{1,9})*(?:-(EA|ea|GA|ga|ngc[\d.]+))?\s*$")
_OPS = ("<=", ">=", "==", "!=", "<", ">")


@total_ordering
class TrtVersion:
    """A comparable TensorRT release number."""

    __slots__ = ("key", "parts")

    def __init__(self, text: str) -> None:
        m = _VERSION.match(str(text))
        if not m:
            shown = repr(str(text)) if len(str(text)) <= 40 else f"{str(text)[:30]!r}…({len(str(text))} characters)"
            raise ValueError(f"not a TensorRT version: {shown} (expected e.g. 8.6, 10.1 or 8.4.3; at most 9 digits a part)")
        tag = (m.group(4) or "").lower()
        rank = -1 if tag == "ea" else 1 if tag.startswith("ngc") else 0
        self.parts = (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0), rank)
        self.key = str(text).strip()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrtVersion) and self.parts == other.parts

    def __lt__(self, other: TrtVersion) -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    def __repr__(self) -> str:
        return f"TrtVersion({self.key!r})"

    def __str__(self) -> str:
        return self.key


class VersionRange:
    """Comparisons joined by ``,`` (and) and ``||`` (or): ``">=7.0,<8.2"``, ``"<8.0 || >=10.8"``;
    ``"all"`` or ``""`` matches everything."""

    def __init__(self, spec: str) -> None:
        self.spec = spec.strip()
        self.alternatives: list[list[tuple[str, TrtVersion]]] = []
        if self.spec.lower() in ("", "all", "*"):
            return
        for alternative in self.spec.split("||"):
            terms = []
            for term in alternative.split(","):
                term = term.strip()
                op = next((o for o in _OPS if term.startswith(o)), None)
                if op is None:
                    raise ValueError(f"bad version range term {term!r} in {spec!r}")
                terms.append((op, TrtVersion(term[len(op) :])))
            self.alternatives.append(terms)

    def __contains__(self, version: TrtVersion | str) -> bool:
        if not self.alternatives:
            return True
        v = version if isinstance(version, TrtVersion) else TrtVersion(version)
        return any(self._all(v, terms) for terms in self.alternatives)

    @staticmethod
    def _all(v: TrtVersion, terms: list[tuple[str, TrtVersion]]) -> bool:
        checks = {
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
            "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
        }
        return all(checks[op](v, bound) for op, bound in terms)

    def __str__(self) -> str:
        return self.spec or "all"
