"""Meta-tests: every hook is tested and documented; the public API and the layout hold."""

from __future__ import annotations

import ast
import re

import pytest

import agentfly_cli
from agentfly_cli.plugin_host import hookspecs
from agentfly_cli.plugin_host.plugins import hook_names
from tests.helpers.paths import REPO_ROOT

HOOKS = hook_names()


def test_there_are_hooks():
    assert len(HOOKS) == 9


def _test_function_names() -> set[str]:
    names = set()
    for path in (REPO_ROOT / "tests").rglob("test_*.py"):  # tests/<concept>/test_*.py
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


def test_nothing_imports_click():
    for path in REPO_ROOT.glob("*/**/*.py"):
        if any(part.startswith(".") for part in path.relative_to(REPO_ROOT).parts):
            continue  # virtual environments (.venv, .venv-bench) and tool caches
        assert not re.search(r"^\s*(import click|from click)", path.read_text(), re.MULTILINE), path


# -- the README as a newcomer reads it -------------------------------------------------------
def _readme() -> str:
    return (REPO_ROOT / "README.md").read_text()


def test_readme_says_how_to_put_agentfly_on_path_right_after_the_two_commands():
    text = _readme()
    after_first_block = text.split("```", 2)[2]
    first_section = after_first_block.split("\n## ", 1)[0]
    assert "source .venv/bin/activate" in first_section


def _recipe_table() -> dict[str, tuple[list[str], list[str]]]:
    """``{recipe: (tools, rewards)}`` from the README's recipe table; parentheses are notes."""
    section = _readme().split("\n## Recipes", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        names = [re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", c)) for c in cells]
        rows[names[0][0]] = (names[2], names[3])
    return rows


def test_readme_recipe_table_matches_the_registered_recipes(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTFLY_CACHE", str(tmp_path))  # where the families write their tasks
    from agentfly_cli.api.recipes import recipe_label
    from agentfly_cli.errors import UserError
    from agentfly_cli.plugin_host.plugins import get_plugin_host
    from agentfly_cli.recipes.loader import load_config

    recipes = {recipe_label(e): e for e in get_plugin_host().components.recipes.entries()}
    table = _recipe_table()
    assert sorted(table) == sorted(recipes)
    for name, (tools, rewards) in table.items():
        family = recipes[name].obj.family
        spec = recipes[name].name
        if family is not None and family.param:
            if not family.example:
                continue  # a family that names no working parameter cannot be loaded here
            spec = f"{spec}:{family.example}"
        try:
            config = load_config(spec)
        except UserError as exc:
            if family is not None and "pip install" in str(exc):
                continue  # a bridge whose extra is not installed: its tests skip too
            raise
        assert tools == list(config.tools), f"README tools of {name}: {tools}"
        assert rewards == [r.name for r in config.reward], f"README reward of {name}: {rewards}"


def test_ci_runs_the_readme_test_command_and_needs_the_real_tokenizers():
    first_block = re.search(r"```bash\n(.*?)```", _readme(), flags=re.DOTALL).group(1)
    test_command = first_block.strip().splitlines()[1].split("#")[0].strip()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(test_command)}$", ci, flags=re.MULTILINE), test_command
    assert "build/realdata/.complete" in ci


# -- what every run prints ------------------------------------------------------------------
@pytest.mark.parametrize("tensorboard", ["installed", "missing"])
def test_train_on_the_tiny_model_prints_no_tensorboard_warning(
    tiny_model, tmp_path, monkeypatch, tensorboard
):
    """The tensorboard sink is on by default; without the `tensorboard` extra a run that did
    not ask for it by name skips it quietly (asked for by name, it warns: test_telemetry)."""
    import sys

    from typer.testing import CliRunner

    from agentfly_cli.cli.app import build_app

    if tensorboard == "missing":
        for name in ("tensorboard", "torch.utils.tensorboard"):
            monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    run = tmp_path / "run"
    result = CliRunner().invoke(build_app(), [
        "train", "calculator", "--model", str(tiny_model), "--out", str(run), "--steps", "1",
        "--no-warm-start", "--set", "trainer.tasks_per_step=2", "--set", "rollout.n=2",
        "--set", "rollout.max_turns=1", "--set", "rollout.max_tokens_per_turn=4",
        "--set", "trainer.eval.every=0",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "tensorboard" not in result.output.lower(), result.output
    assert "warning" not in result.output.lower(), result.output
    assert (run / "tensorboard").exists() == (tensorboard == "installed")


def test_a_run_that_names_the_tensorboard_sink_is_told_when_it_is_missing():
    from agentfly_cli.settings.train import TelemetrySettings
    from agentfly_cli.telemetry.sinks import default_optional_sinks

    assert default_optional_sinks(TelemetrySettings()) == ("tensorboard",)
    assert default_optional_sinks(TelemetrySettings(sinks=["jsonl", "tensorboard"])) == ()


# -- facts the docs state ---------------------------------------------------------------------
NUMBER_WORDS = {
    w: i for i, w in enumerate("one two three four five six seven eight nine".split(), 1)
}


def _doc_texts() -> dict[str, str]:
    paths = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    return {str(p.relative_to(REPO_ROOT)): p.read_text(encoding="utf-8") for p in paths}


def test_every_count_of_hooks_in_the_docs_is_the_number_of_hookspecs():
    counts = []
    for name, text in _doc_texts().items():
        for word in re.findall(r"\b(\d+|[a-z]+) hooks\b", text, flags=re.IGNORECASE):
            number = int(word) if word.isdigit() else NUMBER_WORDS.get(word.lower())
            if number is not None:
                counts.append((name, number))
    assert counts, "the docs no longer say how many hooks there are; drop this test"
    assert all(n == len(HOOKS) for _, n in counts), f"{len(HOOKS)} hookspecs; docs say {counts}"


def test_no_doc_says_what_is_missing_from_this_release():
    """Such claims go stale when the thing arrives (terminal tools, the trainer, backends)."""
    stale = [
        f"{name}: {line.strip()}"
        for name, text in _doc_texts().items()
        for line in text.splitlines()
        if re.search(r"in this release|nothing runs them yet|no trainer", line, re.IGNORECASE)
    ]
    assert stale == []
