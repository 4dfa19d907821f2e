"""The documents of a YAML file the simulator reads, within bounds.

A manifest folder is input like any other: a hostile one must give a message, not a crash.
PyYAML composes nested collections by recursion, so a document nested thousands deep
(``[[[[…]]]]``) ends in RecursionError; and aliases let a few lines stand for a billion
values (each level naming the one below ten times), which kgpu would then walk. The loader
here refuses, with a :class:`yaml.YAMLError` that says where:

- a collection nested deeper than :data:`~kgpu.model.limits.MAX_OBJECT_DEPTH`;
- a document of more than :data:`MAX_DOCUMENT_VALUES` values, every alias counted as the
  values it stands for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import yaml
from yaml.composer import ComposerError
from yaml.nodes import MappingNode, Node, SequenceNode

from kgpu.model.limits import MAX_OBJECT_DEPTH

# Values of one document, aliases expanded: a Node or Pod is about a hundred, so this is a
# List of a hundred thousand objects.
MAX_DOCUMENT_VALUES: Final = 10_000_000


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting depth and values as it composes each document."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values: dict[int, int] = {}  # id(node) -> values it stands for

    def compose_document(self) -> Node | None:
        self._values = {}
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self._depth >= MAX_OBJECT_DEPTH:
            raise ComposerError(
                None,
                None,
                f"values nested more than {MAX_OBJECT_DEPTH} deep",
                self.get_mark(),
            )
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None and id(node) not in self._values:
            self._values[id(node)] = self._count(node)
        return node

    def _count(self, node: Node) -> int:
        """The values ``node`` stands for; its children (or an alias's target) are counted."""
        if isinstance(node, SequenceNode):
            children: list[Node] = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            return 1
        values = 1 + sum(self._values.get(id(child), 1) for child in children)
        if values > MAX_DOCUMENT_VALUES:
            raise ComposerError(
                None,
                None,
                f"more than {MAX_DOCUMENT_VALUES} values in one document, aliases expanded",
                node.start_mark,
            )
        return values


def load_documents(path: Path) -> list[Any]:
    """Every document of the YAML file at ``path``; OSError, UnicodeDecodeError or
    yaml.YAMLError when it cannot be read within the bounds."""
    return list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=_BoundedLoader))
