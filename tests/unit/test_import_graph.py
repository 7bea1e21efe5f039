"""The package's import graph, read from the source (the `ast` of every module): no two
packages import each other, and only tensortorrent/core.py imports the native extension.

A "package" here is a subpackage of tensortorrent (artifact, planning, ...) or one of its
top-level modules (api, build, config, ...). Imports under `if TYPE_CHECKING:` are type
hints, not run: they do not count."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import tensortorrent

ROOT = Path(tensortorrent.__file__).resolve().parent


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement but those in `if TYPE_CHECKING:` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return [
        node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped
    ]


def imported_modules(path: Path) -> tuple[list[str], list[list[str]]]:
    """A module's dotted path under tensortorrent, and the dotted paths of what it imports
    from the package (a `from . import x` names x itself)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    targets = []
    for node in _runtime_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets += [alias.name.split(".")[1:] for alias in node.names if alias.name.startswith("tensortorrent.")]
        elif node.level:
            base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            targets += [base + [alias.name] for alias in node.names] if node.module is None else [base]
        elif node.module and node.module.split(".")[0] == "tensortorrent":
            targets.append(node.module.split(".")[1:])
    return parts, [target for target in targets if target]


def package_edges() -> dict[str, dict[str, set[str]]]:
    """For each package, the packages it imports, each with the modules that do."""
    edges: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in ROOT.rglob("*.py"):
        parts, targets = imported_modules(path)
        if not parts:  # tensortorrent/__init__.py: the public API gathers every package
            continue
        for target in targets:
            if target[0] != parts[0]:
                edges[parts[0]][target[0]].add("/".join(parts))
    return edges


def test_no_two_packages_import_each_other():
    edges = package_edges()
    both_ways = [
        f"{a} <-> {b} ({', '.join(sorted(edges[a][b]))} | {', '.join(sorted(edges[b][a]))})"
        for a in sorted(edges)
        for b in sorted(edges[a])
        if a < b and a in edges.get(b, {})
    ]
    assert both_ways == [], "packages that import each other:\n" + "\n".join(both_ways)


def test_only_the_facade_imports_the_extension():
    importers = sorted(
        "/".join(parts)
        for parts, targets in map(imported_modules, ROOT.rglob("*.py"))
        if any(target[0] == "_core" for target in targets)
    )
    assert importers == ["core"]


def test_the_reader_sees_the_imports_it_must_see():
    # The graph above is only as good as this reading of it.
    parts, targets = imported_modules(ROOT / "runtime" / "plane_call.py")
    assert parts == ["runtime", "plane_call"]
    assert ["core"] in targets and ["planning", "lowering"] in targets and ["runtime", "call_threads"] in targets
    assert "runtime" in package_edges()["api"]
