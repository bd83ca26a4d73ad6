"""What each TensorRT ONNX parser release supports, from ``data/parser_support.json``.

Releases are the documented ones (5.1 ... 11.1). Any other version resolves to the newest
documented GA release at or below it ("10.3 -> 10.1"), and the resolution says so, with the
changelog notes known for the undocumented release.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from graphfix.errors import GraphfixError
from graphfix.trt.versions import TrtVersion, VersionRange


@cache
def _newer() -> dict[str, Any]:
    return json.loads(resources.files("graphfix.trt").joinpath("data/newer_ops.json").read_text())


@cache
def data() -> dict[str, Any]:
    """The parser tables, plus ``newer_ops.json``'s operators that no table lists (newer than
    every documented parser): not listed (``None``) for every release."""
    files = resources.files("graphfix.trt")
    merged = json.loads(files.joinpath("data/parser_support.json").read_text())
    newer = _newer()["ops"]
    for op in newer:
        merged["ops"].setdefault(op, [[merged["version_order"][0], None]])
    merged["newer_ops"] = newer
    return merged


def evidence(key: str) -> str:
    """``newer_ops.json``'s evidence for a release's new importers (``"10.15"``) or for an op no
    parser lists (``"CumProd"``): one wording for the rules and `graphfix check`."""
    added = _newer()
    return added["releases"][key] if key in added["releases"] else added["ops"][key]["evidence"]


@cache
def errors() -> list[dict[str, Any]]:
    return json.loads(resources.files("graphfix.trt").joinpath("data/errors.json").read_text())["errors"]


def versions() -> list[str]:
    return list(data()["version_order"])


def describe_range(rng: VersionRange) -> str:
    """A version range in the words of the documented releases: ``<8.6``, ``>=8.2,<10.0 || >=10.8``, ``all``."""
    order = [v for v in versions() if "-" not in v]
    inside = [TrtVersion(v) in rng for v in order]
    if all(inside):
        return "all"
    if not any(inside):
        return "none"
    parts, k = [], 0
    while k < len(order):
        if not inside[k]:
            k += 1
            continue
        j = k
        while j + 1 < len(order) and inside[j + 1]:
            j += 1
        lo = "" if k == 0 else f">={order[k]}"
        hi = "" if j == len(order) - 1 else f"<{order[j + 1]}"
        parts.append(",".join(p for p in (lo, hi) if p))
        k = j + 1
    return " || ".join(parts)


@dataclass(frozen=True)
class Release:
    """A documented parser release standing in for the version the user asked about."""

    requested: str
    key: str
    note: str

    @property
    def version(self) -> TrtVersion:
        return TrtVersion(self.key)


def resolve(requested: str) -> Release:
    try:
        want = TrtVersion(requested)
    except ValueError as exc:
        raise GraphfixError(f"--trt: {exc}") from exc
    documented = [v for v in versions() if "-EA" not in v]
    newest = TrtVersion(documented[-1])
    if want.parts[0] > newest.parts[0] + 1:  # "86" for 8.6: a typo, not a release years ahead
        known = ", ".join(v for v in documented if "-" not in v)
        raise GraphfixError(f"--trt {requested}: no such TensorRT release (the newest documented is {documented[-1]}; "
                            f"graphfix accepts up to major {newest.parts[0] + 1}); known releases: {known}")
    exact = next((v for v in versions() if TrtVersion(v) == want), None)
    if exact is not None:
        return Release(requested, exact, "")
    below = [v for v in documented if TrtVersion(v) <= want]
    if not below:
        raise GraphfixError(f"--trt {requested}: older than the oldest documented parser ({documented[0]})")
    key = max(below, key=TrtVersion)
    note = f"TensorRT {requested} has no parser document; using {key}, the nearest documented release below it"
    changelog = data()["changelog_only_versions"].get(f"{want.parts[0]}.{want.parts[1]}")
    if changelog:
        note += f" (its changelog: {'; '.join(changelog.get('parser_changes', []))})"
    if want > TrtVersion(documented[-1]):
        note = f"TensorRT {requested} is newer than the newest documented parser; using {key}"
    return Release(requested, key, note)


@dataclass(frozen=True)
class OpSupport:
    supported: bool
    types: tuple[str, ...] | None
    restrictions: str


def op_support(op: str, release: Release) -> OpSupport | None:
    """The op's entry for that release (None: the release's table does not list the op)."""
    runs = data()["ops"].get(op)
    if runs is None:
        return None
    order = versions()
    idx = order.index(release.key)
    entry = None
    for first, value in runs:
        if order.index(first) <= idx:
            entry = value
        else:
            break
    if entry is None:
        return None
    # The importer source is the truth where it was read (docs lag and lead it, PARSER_NOTES §2).
    supported = entry.get("importer_in_source", entry["supported"])
    types = tuple(entry["types"]) if entry.get("types") else None
    return OpSupport(bool(supported), types, entry.get("restrictions", ""))


def unknown_for(op: str, release: Release) -> str | None:
    """Why graphfix cannot say whether ``release.requested`` imports ``op`` (None: it can).

    A release with its own parser document is known; one between two documented releases is known
    where both say the same about the op; one newer than the newest documented is not."""
    if TrtVersion(release.requested) == release.version:
        return None
    documented = [v for v in versions() if "-" not in v]
    above = [v for v in documented if TrtVersion(v) > TrtVersion(release.requested)]
    if not above:
        return (f"graphfix has no information on {op} for TensorRT {release.requested}: its newest parser document is "
                f"{release.key}")
    below, after = op_support(op, release), op_support(op, Release(above[0], above[0], ""))
    if (below is not None and below.supported) == (after is not None and after.supported):
        return None
    return (f"graphfix has no information on {op} for TensorRT {release.requested}: {release.key}'s parser "
            f"{'imports' if below is not None and below.supported else 'lacks'} it, {above[0]}'s "
            f"{'imports' if after is not None and after.supported else 'lacks'} it")


def opset_range(release: Release) -> tuple[int | None, int | None]:
    o = data()["opsets"].get(release.key, {})
    return o.get("min"), o.get("max")


def error(error_id: str) -> dict[str, Any] | None:
    return next((e for e in errors() if e["id"] == error_id), None)
