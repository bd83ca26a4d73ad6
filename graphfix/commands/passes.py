"""``graphfix passes``: every pass in pipeline order, what it fixes and who needs it."""

from __future__ import annotations

import argparse
import json

from graphfix.passes import all_passes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable listing")


def run(args: argparse.Namespace) -> int:
    rows = [
        {"name": p.name, "order": p.order, "summary": p.summary, "fixes": list(p.fixes), "needed_by": p.needed_by}
        for p in all_passes()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['name']}  (TensorRT {r['needed_by']})")
        print(f"    {r['summary']}")
        print(f"    fixes: {', '.join(r['fixes']) or '-'}")
    return 0
