"""The CLI is a thin layer over the public API: a cli module imports nothing of agentfly_cli but
``agentfly_cli.api*``, ``agentfly_cli.cli*`` and the package root (at module level and inside
functions alike)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agentfly_cli.cli

CLI = Path(agentfly_cli.cli.__file__).parent
PACKAGE = CLI.parent

ALLOWED = ("agentfly_cli.api", "agentfly_cli.cli")


def allowed(module: str) -> bool:
    """``module`` is outside agentfly_cli, the package root, or in the API or the CLI."""
    if module != "agentfly_cli" and not module.startswith("agentfly_cli."):
        return True
    return module == "agentfly_cli" or any(
        module == prefix or module.startswith(prefix + ".") for prefix in ALLOWED
    )


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every ``(line, module)`` that ``tree`` imports, wherever the import statement stands."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved inside agentfly_cli.cli
                base = "agentfly_cli.cli" if node.level == 1 else "agentfly_cli"
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module == "agentfly_cli":  # `from agentfly_cli import settings`: a submodule
                found += [
                    (node.lineno, f"agentfly_cli.{alias.name}")
                    for alias in node.names
                    if is_submodule(alias.name)
                ]
            found.append((node.lineno, module))
    return sorted(found)


def is_submodule(name: str) -> bool:
    """``name`` is a module or package of agentfly_cli, not an attribute of its root."""
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def violations(folder: Path) -> list[str]:
    """``file:line imports module`` for each import of an internal module in ``folder``."""
    bad = []
    for path in sorted(folder.glob("*.py")):
        for line, module in imported_modules(ast.parse(path.read_text(), str(path))):
            if not allowed(module):
                bad.append(f"agentfly_cli/cli/{path.name}:{line} imports {module}")
    return bad


def test_cli_imports_only_the_api_and_itself():
    bad = violations(CLI)
    assert not bad, "the CLI calls the public API (agentfly_cli.api), not internals:\n" + "\n".join(
        bad
    )


def test_the_check_sees_every_kind_of_import(tmp_path):
    (tmp_path / "good.py").write_text(
        "import typer\nfrom agentfly_cli import __version__\nfrom agentfly_cli.api import x\n"
        "from agentfly_cli.cli.output import fail\nfrom . import output\n"
    )
    (tmp_path / "bad.py").write_text(
        "import agentfly_cli.errors\n"
        "from agentfly_cli import settings\n"
        "def f():\n    from agentfly_cli.plugin_host.plugins import get_plugin_host\n"
        "if True:\n    from ..serve import app\n"
        "import agentfly_cli.apis\n"
    )
    assert violations(tmp_path) == [
        "agentfly_cli/cli/bad.py:1 imports agentfly_cli.errors",
        "agentfly_cli/cli/bad.py:2 imports agentfly_cli.settings",
        "agentfly_cli/cli/bad.py:4 imports agentfly_cli.plugin_host.plugins",
        "agentfly_cli/cli/bad.py:6 imports agentfly_cli.serve",
        "agentfly_cli/cli/bad.py:7 imports agentfly_cli.apis",
    ]


def test_the_api_modules_are_light_to_import():
    """The CLI imports the API at start-up: no API module may pull pydantic or torch then."""
    names = sorted(p.stem for p in (PACKAGE / "api").glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module('agentfly_cli.api.' + name)\n"
        "print(sorted(m for m in ('pydantic', 'torch', 'transformers') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "components" in names and "envs" in names
    assert result.stdout.strip() == "[]", f"importing agentfly_cli.api.* loads {result.stdout}"
