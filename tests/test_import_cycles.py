"""No import cycle among kgpu's modules (imports under ``if TYPE_CHECKING:`` aside: they
never run). A cycle makes the order of imports matter and the layers meaningless."""

from __future__ import annotations

import grimp


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (strongly connected
    components of more than one module, or a module importing itself), by Tarjan's method
    without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
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
                if len(group) > 1 or node in imports.get(node, ()):
                    found.append(sorted(group))
    return found


def test_cycles_finds_a_cycle_and_nothing_else() -> None:
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert sorted(cycles(imports)) == [["a", "b", "c"], ["e"]]


def test_no_import_cycle_in_kgpu() -> None:
    graph = grimp.build_graph("kgpu", exclude_type_checking_imports=True)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert cycles(imports) == []
