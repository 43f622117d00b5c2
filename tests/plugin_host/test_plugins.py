"""The plugin system: entry points, hooks with provenance, isolation of broken plugins."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import typer
from typer.testing import CliRunner

from agentfly_cli.errors import ComponentConflictError, UnknownComponentError
from agentfly_cli.plugin_host.plugins import hook_names, load_plugins, requested_distributions

HEADER = "from agentfly_cli import hookimpl, tool, reward\n"


def load(*dists):
    return load_plugins(only=set(dists))


def test_builtins_register_through_entry_points():
    host = load("agentfly-cli")
    names = {p.name: p for p in host.plugins}
    assert {"builtin_tools", "builtin_rewards", "builtin_envs"} <= set(names)
    for plugin in names.values():
        assert plugin.builtin and plugin.distribution == "agentfly-cli" and plugin.ok
    calculator = host.components.tools.entry("calculator")
    assert calculator.provenance.plugin == "builtin_tools"
    assert calculator.provenance.builtin
    assert host.components.rewards.entry("math_equal").provenance.plugin == "builtin_rewards"
    assert host.components.envs.entry("scratchpad").provenance.plugin == "builtin_envs"


def test_hook_register_tools(make_plugin):
    dist = make_plugin(
        HEADER
        + """
@tool
def shout(text: str) -> str:
    '''Upper-case the text.'''
    return text.upper()

def plain(x: int) -> int:
    '''A plain function becomes a tool.'''
    return x

@hookimpl
def register_tools(register):
    register(shout)
    register(plain, name="renamed")
""",
        version="2.0.1",
    )
    host = load(dist)
    entry = host.components.tools.entry("shout")
    assert entry.provenance.distribution == dist and entry.provenance.version == "2.0.1"
    assert not entry.provenance.builtin
    assert host.components.tools.get("renamed").name == "renamed"
    assert host.plugins[0].hooks == ["register_tools"]


def test_hook_register_rewards(make_plugin):
    dist = make_plugin(
        HEADER
        + """
@reward
def always(prediction):
    return 1.0

@hookimpl
def register_rewards(register):
    register(always)
    register(lambda prediction, answer: float(prediction == answer), name="lam")
"""
    )
    rewards = load(dist).components.rewards
    assert set(rewards) == {"always", "lam"}
    assert rewards.get("lam").fields == ["answer"]


def test_hook_register_envs(make_plugin):
    dist = make_plugin(
        """
from agentfly_cli import hookimpl, BaseEnv, EnvSpec

class Counter(BaseEnv):
    pass

@hookimpl
def register_envs(register):
    register(EnvSpec(name="counter", factory=Counter, pool_max=4, warm_size=2))
"""
    )
    spec = load(dist).components.envs.get("counter")
    assert (spec.pool_max, spec.warm_size) == (4, 2)
    assert type(spec.create()).__name__ == "Counter"


def test_hook_register_recipes(make_plugin, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model: tiny\n")
    dist = make_plugin(
        f"""
from agentfly_cli import hookimpl

@hookimpl
def register_recipes(register):
    register("tiny", {str(recipe)!r}, description="A tiny recipe")
"""
    )
    entry = load(dist).components.recipes.entry("tiny")
    assert entry.obj.path == str(recipe) and entry.description == "A tiny recipe"


def test_hook_register_backends(make_plugin):
    dist = make_plugin(
        """
from agentfly_cli import hookimpl

def make_backend(config):
    return ("backend", config)

@hookimpl
def register_backends(register):
    register("echo", make_backend, description="Echoes")
"""
    )
    backend = load(dist).components.backends.get("echo")
    assert backend.factory({"a": 1}) == ("backend", {"a": 1})


def test_hook_register_train_backends(make_plugin, tiny_model, tmp_path):
    """A train backend is a plugin away: this one wraps the torch backend, and a run uses it."""
    dist = make_plugin(
        """
from agentfly_cli import hookimpl

def make_marked(model_path, config):
    from agentfly_cli.train_backends.torch_backend import TorchBackend

    backend = TorchBackend(model_path, config)
    backend.built_by_plugin = True
    return backend

@hookimpl
def register_train_backends(register):
    register("marked", make_marked, description="torch, marked")
"""
    )
    host = load("agentfly-cli", dist)
    entry = host.components.train_backends.entry("marked")
    assert entry.description == "torch, marked" and entry.provenance.distribution == dist
    assert {"torch", "deepspeed"} <= set(host.components.train_backends)

    from agentfly_cli.api import load_config
    from agentfly_cli.train.trainer import Trainer

    config = load_config(
        "calculator",
        model=str(tiny_model),
        data={"limit": 2},
        rollout={"n": 2, "max_turns": 1, "max_tokens_per_turn": 4},
        trainer={"steps": 1, "tasks_per_step": 2, "backend": {"name": "marked"}},
    )
    trainer = Trainer(config, run_dir=tmp_path / "run", console=False, host=host)
    assert trainer.fit().steps == 1
    assert trainer.train.built_by_plugin and trainer.shared_model  # shares like torch


def test_hook_register_commands(make_plugin):
    dist = make_plugin(
        """
from agentfly_cli import hookimpl

@hookimpl
def register_commands(app):
    @app.command("hello")
    def hello(name: str = "world"):
        '''Say hello.'''
        print(f"hello {name}")
"""
    )
    host = load(dist)
    app = typer.Typer()

    @app.command("noop")
    def noop():
        """Placeholder so the app is a group."""

    host.add_commands(app)
    host.add_commands(app)  # idempotent per app
    result = CliRunner().invoke(app, ["hello", "--name", "plugins"])
    assert result.exit_code == 0 and result.stdout == "hello plugins\n"


def test_register_hooks_run_once_on_first_use_not_at_load(make_plugin):
    """Building the CLI needs only the commands: the register hooks wait for `components`."""
    dist = make_plugin(
        HEADER
        + """
CALLS = []

@hookimpl
def register_tools(register):
    CALLS.append(1)
    register(lambda: 'ok', name='counted')

@hookimpl
def register_commands(app):
    @app.command("hello")
    def hello():
        '''Say hello.'''
"""
    )
    host = load(dist)
    module = host.manager.get_plugin(host._plugins[0].name)
    app = typer.Typer()
    host.add_commands(app)
    assert [c.name for c in app.registered_commands] == ["hello"]
    assert module.CALLS == []
    with ThreadPoolExecutor(8) as pool:
        registries = list(pool.map(lambda _: host.components.tools, range(8)))
    assert module.CALLS == [1]
    assert all(registry is registries[0] for registry in registries)
    assert registries[0].get("counted").name == "counted"


def test_import_error_is_recorded_and_isolated(make_plugin):
    broken = make_plugin("raise RuntimeError('plugin exploded at import')\n")
    working = make_plugin(
        HEADER + "@hookimpl\ndef register_tools(register):\n"
        "    register(lambda: 'ok', name='fine')\n"
    )
    host = load(broken, working)
    info = {p.distribution: p for p in host.plugins}
    assert info[broken].error == "RuntimeError: plugin exploded at import"
    assert not info[broken].ok
    assert info[working].ok and "fine" in host.components.tools


def test_syntax_error_and_system_exit_are_isolated(make_plugin):
    syntax = make_plugin("def broken(:\n")
    exits = make_plugin("import sys\nsys.exit(3)\n")
    host = load(syntax, exits)
    errors = {p.distribution: p.error for p in host.plugins}
    assert errors[syntax].startswith("SyntaxError")
    assert errors[exits] == "SystemExit: 3"


def test_raising_hook_is_recorded_and_its_items_discarded(make_plugin):
    dist = make_plugin(
        HEADER
        + """
@hookimpl
def register_tools(register):
    register(lambda: 1, name="first")
    raise ValueError("second tool failed")

@hookimpl
def register_rewards(register):
    register(lambda prediction: 1.0, name="still_here")
"""
    )
    host = load(dist)
    info = host.plugins[0]
    assert info.hook_errors == {"register_tools": "ValueError: second tool failed"}
    assert "first" not in host.components.tools
    assert "still_here" in host.components.rewards


def test_bad_component_in_hook_is_recorded(make_plugin):
    dist = make_plugin(
        HEADER
        + """
@hookimpl
def register_tools(register):
    def bad(*args):
        pass
    register(bad)
"""
    )
    info = load(dist).plugins[0]
    assert "cannot be described to a model" in info.hook_errors["register_tools"]


def test_unbound_method_tool_is_rejected(make_plugin):
    dist = make_plugin(
        HEADER
        + """
class Box:
    @tool
    def look(self) -> str:
        return "inside"

@hookimpl
def register_tools(register):
    register(Box.look)
"""
    )
    info = load(dist).plugins[0]
    assert "register(MyToolbox().look)" in info.hook_errors["register_tools"]


def test_misspelled_hook_is_caught(make_plugin):
    dist = make_plugin(
        HEADER + "@hookimpl\ndef register_tool(register):\n    register(lambda: 1, name='x')\n"
    )
    host = load(dist)
    assert host.plugins[0].error == "unknown hook 'register_tool'; did you mean 'register_tools'?"
    assert "x" not in host.components.tools


def test_wrong_hook_arguments_are_caught(make_plugin):
    dist = make_plugin(HEADER + "@hookimpl\ndef register_tools(registry):\n    pass\n")
    error = load(dist).plugins[0].error
    assert error.startswith("PluginValidationError") and "registry" in error


def test_unmarked_hook_function_is_a_warning(make_plugin):
    dist = make_plugin("def register_tools(register):\n    pass\n")
    info = load(dist).plugins[0]
    assert info.ok and info.hooks == []
    assert info.warnings == [
        "function register_tools() is not marked with @hookimpl; it is ignored"
    ]


def test_duplicate_names_name_both_plugins(make_plugin):
    dist = make_plugin(
        HEADER + "@hookimpl\ndef register_tools(register):\n"
        "    register(lambda expression: expression, name='calculator')\n",
        entry_point="rival",
    )
    host = load("agentfly-cli", dist)
    rival = next(p for p in host.plugins if p.name == "rival")
    message = rival.hook_errors["register_tools"]
    assert "tool 'calculator' is registered by both plugin 'builtin_tools' (agentfly-cli" in message
    assert f"plugin 'rival' ({dist} 1.2.3)" in message
    with pytest.raises(ComponentConflictError, match="registered by both"):
        host.components.tools.get("calculator")
    assert host.components.tools.get("answer").name == "answer"  # others unaffected


def test_duplicate_names_within_one_kind_only(make_plugin):
    dist = make_plugin(
        HEADER + "@hookimpl\ndef register_rewards(register):\n"
        "    register(lambda prediction: 1.0, name='calculator')\n"
    )
    host = load("agentfly-cli", dist)
    assert host.plugins[-1].ok
    assert host.components.rewards.get("calculator").name == "calculator"


def test_two_entry_points_with_one_name(make_plugin):
    first = make_plugin("", entry_point="same")
    second = make_plugin("", entry_point="same")
    host = load(first, second)
    errors = [p.error for p in host.plugins]
    assert errors[0] is None and "already named 'same'" in errors[1]


def test_unknown_component_suggests_a_name():
    host = load("agentfly-cli")
    with pytest.raises(UnknownComponentError, match="did you mean 'calculator'"):
        host.components.tools.get("calculater")


def test_load_plugins_env_variable(monkeypatch, make_plugin):
    dist = make_plugin(
        HEADER + "@hookimpl\ndef register_tools(register):\n"
        "    register(lambda: 1, name='from_plugin')\n"
    )
    monkeypatch.setenv("AGENTFLY_LOAD_PLUGINS", dist.upper().replace("-", "_"))
    host = load_plugins()
    assert [p.distribution for p in host.plugins] == [dist]
    assert list(host.components.tools) == ["from_plugin"]

    monkeypatch.setenv("AGENTFLY_LOAD_PLUGINS", "")
    assert load_plugins().plugins == []

    monkeypatch.setenv("AGENTFLY_LOAD_PLUGINS", f"agentfly-cli, {dist}, not-installed")
    host = load_plugins()
    assert "calculator" in host.components.tools and "from_plugin" in host.components.tools
    assert host.missing_requested == ["not-installed"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", set()), (" , ", set()), ("A_b.c, d", {"a-b-c", "d"})],
)
def test_requested_distributions(monkeypatch, value, expected):
    monkeypatch.delenv("AGENTFLY_LOAD_PLUGINS", raising=False)
    if value is not None:
        monkeypatch.setenv("AGENTFLY_LOAD_PLUGINS", value)
    assert requested_distributions() == expected


def test_hook_names_match_the_hookspecs():
    assert hook_names() == [
        "register_tools",
        "register_rewards",
        "register_envs",
        "register_recipes",
        "register_backends",
        "register_train_backends",
        "register_algorithms",
        "register_parsers",
        "register_commands",
    ]


def test_unknown_name_mentions_failed_plugins(make_plugin):
    from agentfly_cli.plugin_host.loading import resolve_tool

    broken = make_plugin("raise ImportError('missing dependency')\n", entry_point="mine")
    host = load("agentfly-cli", broken)
    with pytest.raises(UnknownComponentError, match=r"plugin\(s\) mine failed to load"):
        resolve_tool("my_tool", host)


def test_plugin_commands_cannot_replace_others(make_plugin):
    first = make_plugin(
        """
from agentfly_cli import hookimpl

@hookimpl
def register_commands(app):
    @app.command("plugins")
    def hijack():
        print("hijacked")

    @app.command("fresh")
    def fresh():
        print("fresh")
""",
        dist="agentfly-plugin-aaa",  # loads before -bbb: plugins load in distribution order
        entry_point="first",
    )
    second = make_plugin(
        """
from agentfly_cli import hookimpl

@hookimpl
def register_commands(app):
    @app.command()
    def fresh():
        print("second fresh")
""",
        dist="agentfly-plugin-bbb",
        entry_point="second",
    )
    from agentfly_cli.cli.app import build_app
    from agentfly_cli.plugin_host.plugins import set_plugin_host

    host = load("agentfly-cli", first, second)
    set_plugin_host(host)
    app = build_app()
    assert CliRunner().invoke(app, ["fresh"]).stdout == "fresh\n"
    listing = CliRunner().invoke(app, ["plugins", "--json"])
    assert "hijacked" not in listing.stdout and listing.exit_code == 0
    errors = {p.name: p.hook_errors.get("register_commands") for p in host.plugins}
    assert errors["first"] == "command 'plugins' is already provided by agentfly"
    assert errors["second"] == "command 'fresh' is already provided by plugin 'first'"


def test_same_name_twice_from_one_plugin(make_plugin):
    dist = make_plugin(
        HEADER + "@hookimpl\ndef register_rewards(register):\n"
        "    register(lambda prediction: 1.0, name='twice')\n"
        "    register(lambda prediction: 0.0, name='twice')\n",
        entry_point="dup",
    )
    message = load(dist).plugins[0].hook_errors["register_rewards"]
    assert message.startswith("reward 'twice' is registered twice by plugin 'dup'")


def test_hook_raising_system_exit_is_isolated(make_plugin):
    dist = make_plugin(
        HEADER + "import sys\n@hookimpl\ndef register_tools(register):\n    sys.exit(4)\n"
    )
    assert load(dist).plugins[0].hook_errors == {"register_tools": "SystemExit: 4"}


def test_hook_may_take_fewer_arguments(make_plugin):
    dist = make_plugin(
        HEADER + "CALLS = []\n@hookimpl\ndef register_tools():\n    CALLS.append(1)\n"
    )
    host = load(dist)
    assert host.plugins[0].ok and host.plugins[0].hooks == ["register_tools"]


def test_relative_recipe_paths_are_relative_to_the_plugin(make_plugin, tmp_path):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "recipes").mkdir()
    (site / "recipes" / "mine.yaml").write_text("model: tiny\n")
    dist = make_plugin(
        "from agentfly_cli import hookimpl\n@hookimpl\ndef register_recipes(register):\n"
        "    register('mine', 'recipes/mine.yaml')\n"
    )
    recipe = load(dist).components.recipes.get("mine")
    assert recipe.path == str(site / "recipes" / "mine.yaml")


def test_renaming_on_register_validates_the_name(make_plugin):
    dist = make_plugin(
        HEADER
        + """
@tool
def shout(text: str) -> str:
    return text.upper()

@reward
def always(prediction):
    return 1.0

@hookimpl
def register_tools(register):
    register(shout, name="bad name")

@hookimpl
def register_rewards(register):
    register(always, name="also_always")
"""
    )
    host = load(dist)
    assert "tool name 'bad name' is not valid" in host.plugins[0].hook_errors["register_tools"]
    assert host.components.rewards.get("also_always").name == "also_always"
    assert "always" not in host.components.rewards
