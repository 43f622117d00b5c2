"""The facts the docs state about a release, checked against the code: the hooks, the commands,
and the built-in recipes, LLM backends, train backends, parsers, advantage estimators and
policy losses (what README.md and docs/*.md list must be what is registered)."""

from __future__ import annotations

import re

import pytest

from agentfly_cli.plugin_host import hookspecs
from tests.helpers.paths import REPO_ROOT

NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"
).split()


def read(path: str) -> str:
    return (REPO_ROOT / path).read_text()


def between(text: str, start: str, end: str) -> str:
    """The text after the first ``start`` up to the next ``end``."""
    head = text.index(start) + len(start)
    return text[head : text.index(end, head)]


def ticked(text: str) -> list[str]:
    """Every ``name`` in backticks that is one word (``a b`` and ``make x-y`` are not)."""
    return re.findall(r"`([A-Za-z_][\w.-]*)`", text)


def count_in(text: str, pattern: str) -> int:
    """The number (a digit or an English word) that ``pattern``'s one group matches."""
    found = re.search(pattern, text)
    assert found, f"no {pattern!r} in the text"
    word = found.group(1)
    return int(word) if word.isdigit() else NUMBERS.index(word.lower())


def builtin_names(kind: str) -> set[str]:
    """The names of ``kind`` that the built-in plugins register (a third-party one aside)."""
    import agentfly_cli

    registry = agentfly_cli.get_plugin_host().components.of(kind)
    return {entry.name for entry in registry.entries() if entry.provenance.builtin}


# -- hooks ------------------------------------------------------------------------------------
HOOKS = sorted(name for name in vars(hookspecs) if name.startswith("register_"))


def test_hookspecs_read_as_the_plugin_host_reads_them():
    from agentfly_cli.plugin_host.plugins import hook_names

    assert HOOKS == sorted(hook_names())


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        ("docs/plugins.md", r"any of (\w+) hooks"),
        ("docs/architecture.md", r"the (\w+) hooks"),
    ],
)
def test_the_hook_count(path, pattern):
    assert count_in(read(path), pattern) == len(HOOKS), f"{path} counts the hooks wrong"


def test_the_register_hooks_run_kind_by_kind():
    """plugins.md names every kind a ``register_*`` hook registers, and no other."""
    kinds = between(read("docs/plugins.md"), "kind by kind (", ")")
    named = {"register_" + kind.strip().replace(" ", "_") for kind in kinds.split(",")}
    assert named == set(HOOKS) - {"register_commands"}


def test_architecture_names_every_hook():
    text = read("docs/architecture.md")
    assert [hook for hook in HOOKS if f"`{hook}`" not in text] == []


# -- commands ---------------------------------------------------------------------------------
def cli_commands() -> set[str]:
    """``agentfly`` commands as ``name`` or ``group sub``, hidden ones aside."""
    from agentfly_cli.cli.app import build_app

    app = build_app(with_plugin_commands=False)
    names = {c.name for c in app.registered_commands if c.hidden is not True}
    for group in app.registered_groups:
        if group.hidden is True:
            continue
        for command in group.typer_instance.registered_commands:
            if command.hidden is not True:
                names.add(f"{group.name} {command.name or command.callback.__name__}")
    return names


def readme_commands() -> set[str]:
    """The commands of README.md's ``## CLI`` block: ``agentfly WORD`` or ``agentfly WORD SUB``
    (a lower-case second word that is not an argument)."""
    block = between(read("README.md"), "## CLI\n\n```bash\n", "```")
    names = set()
    for line in block.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "agentfly" or words[1].startswith("-"):
            continue
        sub = words[2] if len(words) > 2 and re.fullmatch(r"[a-z]+", words[2]) else None
        names.add(f"{words[1]} {sub}" if sub else words[1])
    return names


def test_readme_lists_every_command():
    assert readme_commands() == cli_commands()


def test_cli_page_has_a_section_per_command():
    headings = re.findall(r"^## agentfly (.+)$", read("docs/cli.md"), flags=re.MULTILINE)
    covered = {word for heading in headings for word in re.findall(r"[a-z]+", heading)}
    tops = {name.split()[0] for name in cli_commands()}
    assert sorted(tops - covered) == []


# -- what a release has -----------------------------------------------------------------------
def readme_recipes() -> set[str]:
    table = between(read("README.md"), "| recipe | trains |", "\n\n")
    # a recipe family is spelled as `agentfly recipes list` spells it: `reasoning_gym:NAME`
    return set(re.findall(r"^\| `([\w-]+)(?::[A-Z_:]+)?` \|", table, flags=re.MULTILINE))


def test_recipes():
    assert readme_recipes() == builtin_names("recipes")
    status = between(read("README.md"), "## Status", "## Recipes")
    assert count_in(status, r"a \*\*task suite\*\* of (\w+) recipes") == len(readme_recipes())


def test_llm_backends():
    bullet = between(read("README.md"), "- Backends: ", "See [docs/backends.md]")
    assert set(re.findall(r"`(\w+)`\s+\(", bullet)) == builtin_names("backends")
    headings = re.findall(r"^## ([a-z_]+)$", read("docs/backends.md"), flags=re.MULTILINE)
    assert set(headings) == builtin_names("backends")


def test_train_backends():
    bullet = between(read("README.md"), "- Train backends: ", "LoRA")
    assert set(re.findall(r"`(\w+)`\s+\(", bullet)) == builtin_names("train_backends")
    row = between(read("docs/training.md"), "| `name` | `torch` |", "\n")
    assert set(ticked(row.split("or a plugin")[0])) == builtin_names("train_backends")


def test_parsers():
    bullet = between(read("README.md"), "- Tool calls: ", "Bad output")
    assert set(ticked(bullet)) == builtin_names("parsers")
    table = between(read("docs/chat.md"), "| name | the model writes | notes |", "\n\n")
    assert set(re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)) == builtin_names("parsers")


def test_advantage_estimators_and_policy_losses():
    readme = read("README.md")
    estimators = between(readme, "- Advantage estimators", "Policy losses")
    losses = between(readme, "Policy losses", "Loss aggregation")
    assert set(ticked(estimators)) == builtin_names("advantages")
    assert set(ticked(losses)) == builtin_names("policy_losses")
    training = read("docs/training.md")
    for key, kind in (("advantage", "advantages"), ("policy_loss", "policy_losses")):
        meaning = between(training, f"| `{key}` |", "\n").split("|")[1]  # after the default
        assert set(ticked(meaning.split("or a plugin")[0])) == builtin_names(kind), key


# -- the layers of docs/architecture.md -------------------------------------------------------
def layer_rows() -> list[str]:
    """The first column of architecture.md's layer table, bottom first (``errors`` ...)."""
    table = between(read("docs/architecture.md"), "| layer | what it holds |", "\n\n")
    return [
        re.sub(r"\.py$|/$", "", name) for name in re.findall(r"^\| `([\w/.]+)` \|", table, re.M)
    ]


def top_level_imports(path) -> set[str]:
    """The ``agentfly_cli.X`` that ``path`` imports at module level (``TYPE_CHECKING`` aside)."""
    import ast

    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        names |= {m.split(".")[1] for m in modules if m.startswith("agentfly_cli.")}
    return names


def test_the_layer_table_has_every_folder():
    package = REPO_ROOT / "agentfly_cli"
    have = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    have |= {p.stem for p in package.glob("*.py") if not p.stem.startswith("__")}
    assert sorted(layer_rows()) == sorted(have)


def test_the_layer_table_is_in_import_order():
    """Each row imports (at module level) only from itself and the rows below it."""
    rows = layer_rows()
    package = REPO_ROOT / "agentfly_cli"
    upward = []
    for i, row in enumerate(rows):
        files = [package / f"{row}.py"] if (package / f"{row}.py").exists() else []
        files = files or sorted((package / row).rglob("*.py"))
        for path in files:
            for name in top_level_imports(path) - set(rows[: i + 1]):
                upward.append(f"{path.relative_to(package)} imports {name}")
    assert upward == []
