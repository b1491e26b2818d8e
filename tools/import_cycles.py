"""Import cycles between the project's modules, found on the graph import-linter builds
(``grimp``; imports inside functions and under ``if TYPE_CHECKING:`` count as edges too).

``python tools/import_cycles.py`` prints each cycle (a strongly connected group of
modules) and exits 1 if there is one; ``.ci/run`` runs it beside ``lint-imports``, whose
layers contract does not look inside a floor (modules joined by ":" may import each other).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import grimp

ROOT_PACKAGES = ("dataflow", "source_support", "connectors")


def import_cycles(packages: Iterable[str] = ROOT_PACKAGES) -> list[list[str]]:
    """Each group of modules that import one another in a circle, sorted; [] if none."""
    graph = grimp.build_graph(*packages)
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    # Tarjan's strongly connected components, with an explicit stack: no recursion limit.
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.find_modules_directly_imported_by(step)))))
                elif step in on_stack:
                    low[module] = min(low[module], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    cycles = import_cycles()
    for group in cycles:
        print(f"cycle of {len(group)} modules: {' '.join(group)}")
    print(f"{len(cycles)} import cycle(s)")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
