"""One topological order for node lists (the export's sort and a body exported node by node)."""

from __future__ import annotations

import heapq


def stable_order(deps: list[set[int]]) -> list[int]:
    """Indices in topological order, the stored order kept where it holds (Kahn's algorithm with a
    heap: linear up to the log factor); ``deps[k]``: the indices node ``k`` reads from. Nodes on a
    cycle are left out (the caller decides)."""
    users: list[list[int]] = [[] for _ in deps]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    waiting = [len(ds) for ds in deps]
    ready = [k for k, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, u)
    return order
