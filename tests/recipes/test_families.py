"""Recipe families: ``register(name, RecipeFamily(...))`` makes ``NAME:PARAM`` a recipe, built
on demand, whose tasks land in the cache once; its options come from ``--set NAME.KEY=...``."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.plugin_host.plugins import load_plugins
from agentfly_cli.recipes.families import split_spec, tasks_file, write_tasks
from agentfly_cli.recipes.loader import load_config, resolve_recipe_path
from tests.helpers.recipe_checks import agentfly

FAMILY = """
from agentfly_cli import hookimpl, RecipeFamily, UserError
from agentfly_cli.recipes.families import tasks_file, write_tasks

BUILDS = []

def build(param, options):
    if param not in ("add", "sub"):
        raise UserError(f"unknown op {param!r}; ops: add, sub")
    size = options.get("size", 3)
    BUILDS.append((param, dict(options)))
    path = write_tasks(
        tasks_file("ops", param, {"size": size}),
        lambda: ({"id": f"{param}{i}", "question": f"{param} {i}", "answer": str(i),
                  "level": i % 2} for i in range(size)),
    )
    return {"name": f"ops-{param}", "model": "tiny", "reward": "exact_match",
            "data": {"path": str(path), "holdout": 0.25},
            "trainer": {"curriculum": {"field": "level"}},
            "check": {"gold": "ANSWER: {answer}"}}

@hookimpl
def register_recipes(register):
    register("ops", RecipeFamily(build=build, param="OP", options={"size": "rows"},
                                 example="add"), "arith ops")
    register("plain_ops", RecipeFamily(build=lambda p, o: build("add", o), param=None), "add")
"""


@pytest.fixture
def host(make_plugin, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTFLY_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "plain.yaml"
    recipe.write_text("model: tiny\n")
    source = FAMILY + f"\n    register('plain', {str(recipe)!r}, 'a file')\n"
    return load_plugins(only={make_plugin(source, dist="agentfly-ops")})


def _module(host):
    return next(iter(host.manager.get_plugins()))


def test_hook_register_recipes_takes_a_family(host):
    entry = host.components.recipes.entry("ops")
    assert entry.obj.family is not None and entry.obj.path is None
    assert entry.obj.family.spelled("ops") == "ops:OP" and entry.description == "arith ops"
    config = load_config("ops:add", host=host)
    assert config.name == "ops-add" and config.data.holdout == 0.25
    assert config.trainer.curriculum.field == "level"
    rows = [json.loads(line) for line in open(config.data.path)]
    assert [r["id"] for r in rows] == ["add0", "add1", "add2"]
    assert str(config.data.path).startswith(str(tasks_file("ops", "x", {}).parent))
    assert load_config("plain_ops", host=host).name == "ops-add"  # a family without a param


def test_options_come_from_set_and_tasks_are_written_once(host):
    config = load_config("ops:sub", ["ops.size=5", "rollout.n=3"], host=host)
    assert config.rollout.n == 3
    assert len(open(config.data.path).read().splitlines()) == 5
    again = load_config("ops:sub", ["ops.size=5"], host=host, **{"ops.size": 5})
    assert again.data.path == config.data.path  # the same key, the same file, reused
    other = load_config("ops:sub", host=host, ops={"size": 2})  # the Python API's spelling
    assert other.data.path != config.data.path
    assert [options for _, options in _module(host).BUILDS] == [
        {"size": 5},
        {"size": 5},
        {"size": 2},
    ]


@pytest.mark.parametrize(
    ("spec", "overrides", "message"),
    [
        ("ops", [], "recipe 'ops' needs a parameter: ops:OP, e.g. ops:add"),
        ("ops:mul", [], "unknown op 'mul'; ops: add, sub"),
        ("ops:add", ["ops.sizes=2"], "--set ops.sizes: unknown option of ops; options: size"),
        ("plain:x", [], "recipe 'plain' takes no parameter"),
        ("plain_ops:x", [], "recipe 'plain_ops' takes no parameter"),
        ("nope:add", [], "unknown recipe 'nope'"),
    ],
)
def test_bad_names_are_one_line(host, spec, overrides, message):
    with pytest.raises(UserError) as caught:
        load_config(spec, overrides, host=host)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_family_has_no_file(host):
    assert resolve_recipe_path("plain", host).name == "plain.yaml"
    with pytest.raises(UserError, match="built by its plugin"):
        resolve_recipe_path("ops:add", host)


def test_write_tasks_is_all_or_nothing_and_reused(tmp_path):
    path = tmp_path / "t" / "rows.jsonl"

    def broken():
        yield {"id": 1}
        raise RuntimeError("the generator broke")

    with pytest.raises(RuntimeError):
        write_tasks(path, broken)
    assert not path.exists() and list(path.parent.iterdir()) == []
    write_tasks(path, lambda: [{"id": 1, "q": "é"}])
    write_tasks(path, lambda: pytest.fail("a written file is reused"))
    assert json.loads(path.read_text()) == {"id": 1, "q": "é"}


def test_split_spec():
    assert split_spec("reasoning_gym:chain_sum+basic_arithmetic=2") == (
        "reasoning_gym",
        "chain_sum+basic_arithmetic=2",
    )
    assert split_spec("calculator") == ("calculator", None)
    assert split_spec("humaneval:") == ("humaneval", "")


def test_the_cli_lists_and_shows_a_family(host, monkeypatch):
    from agentfly_cli.plugin_host import plugins

    monkeypatch.setattr(plugins, "_host", host)
    listed = agentfly("recipes", "list", "--json")
    assert listed.exit_code == 0, listed.output
    names = {item["name"]: item for item in json.loads(listed.stdout)}
    assert names["ops:OP"]["path"] is None and names["ops:OP"]["description"] == "arith ops"
    assert names["plain_ops"]["path"] is None and "plain" in names
    shown = agentfly("recipes", "show", "ops:add", "--json")
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.stdout)
    assert info["name"] == "ops:add" and info["data"]["rows"] == 3
    assert info["options"] == {"size": "rows"} and info["data"]["choices"]["level"]
    human = agentfly("recipes", "show", "ops:add")
    assert "--set ops.size=" in human.stdout and "agentfly train ops:add" in human.stdout
    bad = agentfly("recipes", "show", "ops:mul")
    assert bad.exit_code == 2 and "unknown op 'mul'" in bad.output
