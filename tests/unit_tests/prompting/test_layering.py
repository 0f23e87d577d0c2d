"""The prompts are a layer under the graphs: `prompting` imports nothing from `graphs`."""

from __future__ import annotations

import ast
from pathlib import Path

import langchain_memalign.prompting

PROMPTING = Path(langchain_memalign.prompting.__file__).parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_prompting_imports_nothing_from_graphs() -> None:
    files = sorted(PROMPTING.glob("*.py"))
    assert len(files) >= 7  # the package's modules were found
    for path in files:
        graphs = {m for m in imported_modules(path) if m.startswith("langchain_memalign.graphs")}
        assert not graphs, f"{path.name} imports {sorted(graphs)}"
