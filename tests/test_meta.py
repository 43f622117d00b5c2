"""Meta-tests: every hook is tested and documented; the public API and the layout hold."""

from __future__ import annotations

import ast
import re

import pytest

import agentfly_cli
from agentfly_cli import hookspecs
from agentfly_cli.plugins import hook_names
from tests.conftest import REPO_ROOT

HOOKS = hook_names()


def test_there_are_hooks():
    assert len(HOOKS) == 7


def _test_function_names() -> set[str]:
    names = set()
    for path in (REPO_ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text())
        names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    return names


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_test(hook):
    assert f"test_hook_{hook}" in _test_function_names(), f"write test_hook_{hook}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented(hook):
    docs = (REPO_ROOT / "docs" / "plugins.md").read_text()
    headings = re.findall(r"^## (\w+)\s*$", docs, flags=re.MULTILINE)
    assert hook in headings, f"docs/plugins.md needs a '## {hook}' section"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_one_line_docstring(hook):
    doc = getattr(hookspecs, hook).__doc__
    assert doc and len(doc.strip().splitlines()) == 1


def test_public_api_exports_resolve():
    for name in agentfly_cli.__all__:
        assert getattr(agentfly_cli, name) is not None
    assert sorted(agentfly_cli.__all__) == sorted(["__version__", *agentfly_cli._EXPORTS])
    with pytest.raises(AttributeError):
        agentfly_cli.not_a_thing  # noqa: B018


def test_required_layout():
    for path in (
        "agentfly_cli",
        "plugins",
        "tools_builtin",
        "envs_builtin",
        "tests",
        "pyproject.toml",
        "Makefile",
        "README.md",
        ".ci/run",
    ):
        assert (REPO_ROOT / path).exists(), path


def test_readme_opens_with_the_two_commands():
    text = (REPO_ROOT / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.DOTALL).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make demo", "make test"]


def test_no_module_is_much_over_800_lines():
    for folder in ("agentfly_cli", "tools_builtin", "envs_builtin", "rewards_builtin"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            assert len(path.read_text().splitlines()) <= 800, path


def test_nothing_imports_click():
    for path in REPO_ROOT.glob("*/**/*.py"):
        if any(part.startswith(".") for part in path.relative_to(REPO_ROOT).parts):
            continue  # virtual environments (.venv, .venv-bench) and tool caches
        assert not re.search(r"^\s*(import click|from click)", path.read_text(), re.MULTILINE), path
