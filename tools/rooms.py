"""Rooms, arrows, upward arrows and circles of the import graph, for a reshape's before-and-after note.

    .venv/bin/python tools/rooms.py [--root DIR] [--verbose]

A *room* is what the tree groups by responsibility: `bot`, `handlers` and `training` whole; inside `jobs`
each subpackage (the two backends apart, and what both share as `jobs.backends`) and each top-level module
(`jobs.lineage`, `jobs.errors`, ...). The flat backend modules of older trees (`jobs/backends/local_runner.py`,
`sagemaker_session.py`, ...) count in their backend's room, so two commits compare.

An *arrow* is a room importing another (every import, TYPE_CHECKING ones included: they are arrows a reader
follows). An arrow is *upward* when it points from a lower floor to a higher one (FLOORS below: the entry
points on top, the domain's ground floor and the shared vocabulary at the bottom). A *circle* is a set of
rooms, or of modules, that reach each other (a strongly connected component of more than one).

Needs grimp (installed with import-linter) and only the source tree: run it at any commit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

#: Higher floors may import lower ones; an arrow to a higher floor is upward. Sideways is allowed.
FLOORS: dict[str, int] = {
    "bot": 9,
    "handlers": 8,
    "jobs.releases": 8,  # ending-stage steps: register a finished run's model, promote a scheduled one
    "jobs.schedules": 7,  # a schedule launches through the lifecycle's service
    "jobs.endings": 7,  # after an ending: reads the lifecycle's events and forecasts
    "jobs.lifecycle": 6,
    "jobs.endpoints": 6,
    "jobs.reporting": 5,
    "jobs.notifications": 5,
    "jobs.recipes": 5,
    "jobs.budget": 5,
    "jobs.permissions": 5,
    "jobs.registry": 5,  # model packages: what the endpoints promote, what the releases register
    "jobs.backends.local": 4,
    "jobs.backends.sagemaker": 4,
    "jobs.backends": 4,
    "jobs.store": 3,
    "jobs.lineage": 2,
    "jobs.comparison": 2,  # one run's final metrics against another's, on the domain's lineages
    "jobs.backend": 2,
    "jobs.planning": 1,
    "jobs.settings": 1,
    "jobs.records": 0,
    "jobs.errors": 0,
    "jobs.clock": 0,
    "jobs.file_lock": 0,
    "jobs": 0,
    "training": 0,
}
PACKAGES = ("bot", "handlers", "jobs", "training")
_LOCAL = ("local",)
_SAGEMAKER = ("sagemaker", "aws_errors")


def room_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "jobs":
        return parts[0]
    if len(parts) == 1:
        return "jobs"
    if parts[1] == "backends" and len(parts) > 2:
        name = parts[2]
        if name.startswith(_LOCAL):
            return "jobs.backends.local"
        if name.startswith(_SAGEMAKER):
            return "jobs.backends.sagemaker"
        return "jobs.backends"
    return f"jobs.{parts[1]}"


def components(nodes: Iterable[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    graph: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def measure(root: Path, *, verbose: bool = False) -> dict[str, int]:
    import grimp

    sys.path.insert(0, str(root))
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = {m for m in graph.modules if m.split(".")[0] in PACKAGES}
    module_edges: set[tuple[str, str]] = set()
    for importer in modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported in modules and imported != importer:
                module_edges.add((importer, imported))
    rooms = {room_of(m) for m in modules}
    arrows = {(room_of(a), room_of(b)) for a, b in module_edges if room_of(a) != room_of(b)}
    upward = sorted((a, b) for a, b in arrows if FLOORS.get(a, 0) < FLOORS.get(b, 0))
    room_circles = components(rooms, arrows)
    # A package's __init__ importing its own modules is how Python packages work, not a circle of rooms.
    module_circles = components(modules, {(a, b) for a, b in module_edges if not _is_parent(b, a)})
    if verbose:
        for a, b in upward:
            print(f"  upward: {a} -> {b}  ({_why(a, b, module_edges)})")
        for circle in room_circles:
            print(f"  room circle: {' <-> '.join(circle)}")
        for circle in module_circles:
            print(f"  module circle: {' <-> '.join(circle)}")
    return {
        "rooms": len(rooms),
        "arrows": len(arrows),
        "upward arrows": len(upward),
        "room circles": len(room_circles),
        "module circles": len(module_circles),
        "modules": len(modules),
        "module imports": len(module_edges),
    }


def _is_parent(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def _why(a: str, b: str, edges: set[tuple[str, str]]) -> str:
    return ", ".join(sorted(f"{x} -> {y}" for x, y in edges if room_of(x) == a and room_of(y) == b)[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout to measure (default: here)")
    parser.add_argument("--verbose", action="store_true", help="name each upward arrow and circle")
    args = parser.parse_args()
    for name, value in measure(args.root.resolve(), verbose=args.verbose).items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
