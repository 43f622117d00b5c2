"""The layout's limits (issue 17): no import cycle between modules, no module over 600 lines,
no class much over 300 lines. Read from the source, so a refactor that breaks one fails here."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentfly_cli", "tools_builtin", "envs_builtin", "rewards_builtin", "bridges_builtin")
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 330  # "about 300"


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_statements(body: list[ast.stmt]):
    """Import statements that run when the module is imported (not in functions, classes'
    methods or ``if TYPE_CHECKING:`` blocks)."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            yield from _import_time_statements(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _import_time_statements(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                yield from _import_time_statements(handler.body)
        elif isinstance(node, ast.ClassDef):
            yield from _import_time_statements(node.body)


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports at import time."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _import_time_statements(ast.parse(path.read_text()).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
                targets = [t if t in modules else base for t in targets]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert "agentfly_cli.envs.pool_warmth" in graph["agentfly_cli.envs.pool"]
    assert "agentfly_cli.train.tensors.step_batch" in graph["agentfly_cli.train.update"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_over_600_lines():
    long = {
        str(path.relative_to(REPO_ROOT)): n
        for path in _modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_class_much_over_300_lines():
    long = {}
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    long[f"{path.relative_to(REPO_ROOT)}:{node.name}"] = lines
    assert not long, f"classes over {MAX_CLASS_LINES} lines: {long}"


MAX_FOLDER_SHARE = 0.15  # no folder holds more than 15% of the package's code


def folder_shares(package: Path) -> dict[str, float]:
    """Each folder of ``package`` (with its subfolders) and its share of the package's lines."""
    lines = {path: len(path.read_text().splitlines()) for path in package.rglob("*.py")}
    total = sum(lines.values())
    shares: dict[str, float] = {}
    for folder in (p for p in package.rglob("*") if p.is_dir() and (p / "__init__.py").exists()):
        inside = sum(n for path, n in lines.items() if folder in path.parents)
        shares[str(folder.relative_to(package))] = inside / total
    return shares


def test_the_folder_share_counts_subfolders(tmp_path):
    (tmp_path / "big" / "sub").mkdir(parents=True)
    for folder in (tmp_path / "big", tmp_path / "big" / "sub"):
        (folder / "__init__.py").write_text("")
    (tmp_path / "big" / "sub" / "a.py").write_text("x = 1\n" * 3)
    (tmp_path / "b.py").write_text("y = 2\n")
    assert folder_shares(tmp_path) == {"big": 0.75, "big/sub": 0.75}


def test_no_folder_holds_more_than_15_percent_of_the_code():
    shares = folder_shares(REPO_ROOT / "agentfly_cli")
    over = {name: f"{share:.1%}" for name, share in shares.items() if share > MAX_FOLDER_SHARE}
    assert not over, f"split these folders by concept (limit {MAX_FOLDER_SHARE:.0%}): {over}"
