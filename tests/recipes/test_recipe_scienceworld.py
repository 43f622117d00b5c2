"""The ``scienceworld`` recipe: packaged tasks, the JVM env and its tools, the score reward,
scripted and tiny-model rollouts, and a short training run. Needs Java 17+ (skipped without)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

import agentfly_cli
from agentfly_cli.errors import UserError
from tests.helpers.recipe_checks import (
    TINY_TURN,
    check_short_training_run,
    check_tiny_model_rollout,
    check_warm_start_plays_solutions,
    json_call,
    scripted_rollout,
)

pytest.importorskip(
    "scienceworld", reason="scienceworld is not installed (pip install scienceworld)"
)
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("java not found: ScienceWorld needs Java 17+", allow_module_level=True)

from envs_builtin import scienceworld_sim as sws  # noqa: E402
from envs_builtin.scienceworld_env import (  # noqa: E402
    SCIENCEWORLD,
    ScienceWorldEnv,
    render,
    sw_act,
    sw_actions,
    sw_inventory,
    sw_look,
    sw_task,
    task_spec,
)
from rewards_builtin.scienceworld import final_score, scienceworld_score  # noqa: E402

DATA = Path(agentfly_cli.__file__).parent / "recipes" / "data" / "scienceworld.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
FIND = next(r for r in ROWS if r["task_name"] == "find-non-living-thing")
LIVING = next(r for r in ROWS if r["task_name"] == "find-living-thing")
LIFESPAN = next(r for r in ROWS if r["task_name"] == "lifespan-longest-lived")
SMALL_ENVS = [
    "--set", "rollout.max_total_tokens=6144",
    "--set", "envs.scienceworld.pool_max=2",  # at most two JVMs on a 2-core machine
]  # fmt: skip
SMALL_RUN = ["--set", "rollout.max_tokens_per_turn=64", *SMALL_ENVS]  # tiny BPE: more tokens


def java_children() -> list[int]:
    """Our child processes that are JVMs, zombies included (a reaped JVM is gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == "java" and int(rest.split()[1]) == os.getpid():
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def sim():
    """One JVM for the module's gold paths."""
    simulator = sws.Simulator()
    yield simulator
    simulator.close()


def gold(sim, row) -> list[str]:
    """ScienceWorld's own gold action sequence for a packaged row (get_gold_action_sequence)."""
    actions = sim.plan(row["task_name"], row["variation"], row["simplifications"])
    assert actions and not actions[0].startswith("ERROR"), actions
    return actions


# -- data ----------------------------------------------------------------------------------------
def test_packaged_tasks_are_short_scienceworld_tasks(sim):
    assert len(ROWS) == 260 and len({r["id"] for r in ROWS}) == len(ROWS)
    assert len({(r["task_name"], r["variation"]) for r in ROWS}) == len(ROWS)
    names = set(sim.task_names)
    for row in ROWS:
        assert row["task_name"] in names and row["simplifications"] == "easy"
        assert row["question"].startswith(row["task_description"] + "\n\n")
        assert "You also see:" in row["question"]  # the first room, with its doors
    sim.load(FIND["task_name"], 0)
    assert FIND["variation"] in sim.variations("train")


# -- the env and its tools -----------------------------------------------------------------------
async def _play(row, actions):
    env = ScienceWorldEnv()
    await env.start()
    first = await env.reset(row)
    room = row["question"].split("\n\n", 1)[1]  # the data sorts its lists
    assert sorted(first["observation"].splitlines()) == sorted(room.splitlines())
    assert not first["done"]
    results = [await sw_act(env=env, action=a) for a in actions]
    return env, results


def test_env_plays_a_task_across_steps_and_ends_when_won(sim, caplog):
    actions = gold(sim, FIND)

    async def main():
        before = set(java_children())
        env, results = await _play(FIND, actions)
        pid = env.sim.pid
        assert pid in java_children()
        assert all(r.ok for r in results)
        scores = [r.info["score"] for r in results]
        assert scores == sorted(scores) and scores[-1] == 100  # progress is scored as it comes
        assert (
            results[-1].terminal
            and "The task is complete. Score: 100/100." in results[-1].observation
        )
        assert not any(r.terminal for r in results[:-1])
        after = await sw_act(env=env, action="look around")  # over: not sent to the simulator
        assert after.terminal and after.observation.startswith("The task is over.")
        state = await env.step({"op": "state"})
        assert state["won"] and state["done"] and state["moves"] >= 1
        assert await env.healthy()
        await env.close()
        await env.close()  # twice is fine
        assert not await env.healthy()
        assert set(java_children()) == before  # the JVM exited and was reaped

    asyncio.run(main())
    # Java object proxies freed after the JVM stopped do not try to reach it (that logged
    # connection errors with tracebacks from inside the garbage collector).
    with caplog.at_level(logging.DEBUG, logger="py4j"):
        gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_tools_free_actions_hints_and_a_failed_task():
    async def main():
        env = ScienceWorldEnv()
        await env.start()
        await env.reset(LIVING)
        look = await sw_look(env=env)
        assert look.observation.startswith("This room is called") and look.observation.endswith(
            "Score: 8/100."
        )  # easy mode's open doors already meet a sub-goal
        assert "inventory" in (await sw_inventory(env=env)).observation
        task = await sw_task(env=env)
        assert task.observation.startswith(LIVING["task_description"])
        listed = (await sw_actions(env=env)).observation.splitlines()
        assert "look around" in listed and "reset task" not in listed
        assert listed[-1].startswith("... and") and len(listed) == 41
        focus = (await sw_actions(env=env, contains="FOCUS on")).observation.splitlines()
        assert focus and all(a.startswith("focus on") for a in focus)
        assert (
            "(no valid actions containing 'zz')"
            == (await sw_actions(env=env, contains="zz")).observation
        )
        odd = await sw_act(env=env, action="xyzzy")  # the simulator's answer, plus a hint
        assert odd.ok and odd.observation.startswith("No known action matches that input.")
        assert "Actions look like:" in odd.observation and not odd.terminal
        doors = await sw_act(env=env, action="open door")  # ambiguous: a numbered list
        assert doors.observation.startswith("Ambiguous request") and "0:" in doors.observation
        assert "number" in doors.observation
        assert "The door is" in (await sw_act(env=env, action="0")).observation
        assert (await env.step({"op": "state"}))["moves"] == 1  # free actions use no move
        failed = await sw_act(env=env, action="focus on air")  # not a living thing
        assert failed.terminal and "The task has failed. Score: -100/100." in failed.observation
        assert (await sw_actions(env=env)).observation == "(no valid actions)"
        await env.close()

    asyncio.run(main())


def test_bad_actions_and_tasks_are_clear_errors():
    async def main():
        env = ScienceWorldEnv(java_options=["-Xmx200m"])
        await env.start()
        with pytest.raises(RuntimeError, match="no task is loaded"):
            await env.step("look around")
        with pytest.raises(ValueError, match="'task_name' field"):
            await env.reset({"question": "no task here"})
        with pytest.raises(ValueError, match="unknown ScienceWorld task 'fly'"):
            await env.reset({"task_name": "fly"})
        with pytest.raises(ValueError, match="has variations 0-299, not 5000"):
            await env.reset({"task_name": "find-plant", "variation": 5000})
        with pytest.raises(ValueError, match="unknown simplification 'hard'"):
            await env.reset({"task_name": "find-plant", "simplifications": "hard"})
        await env.reset(FIND)
        for action, error in (
            ({"action": "  "}, "give a ScienceWorld action"),
            ({"action": "look around\nlook around"}, "one action per call"),
            ({"action": "x" * 500}, "longer than"),
            ({"action": "Reset  Task"}, "not allowed"),
            ({"op": "fly"}, "unknown op"),
            (42, "a string or a dict"),
        ):
            with pytest.raises((ValueError, TypeError), match=error):
                await env.step(action)
        empty = await sw_act(env=env, action=" ")  # through the tool: an error observation
        assert empty.status == "error" and "give a ScienceWorld action" in empty.observation
        assert await env.reset(None) is None  # clean up for reuse
        with pytest.raises(RuntimeError, match="no task"):
            await env.step("look around")
        await env.reset(LIFESPAN)  # and the next task loads
        assert (await env.step({"op": "state"}))["score"] == 0
        await env.close()
        with pytest.raises(RuntimeError, match="closed"):
            await env.step("look around")

    asyncio.run(main())


def test_task_spec_reads_the_row():
    assert task_spec({"task_name": " find-plant "}) == {
        "task_name": "find-plant", "variation": 0, "simplifications": "easy",
    }  # fmt: skip
    assert (
        task_spec({"task_name": "melt", "variation": 3, "simplifications": ""}, "easy")[
            "simplifications"
        ]
        == ""
    )
    for row, error in (({"task_name": "melt", "variation": "3"}, "whole number"),
                       ({"task_name": "melt", "simplifications": 1}, "a string")):  # fmt: skip
        with pytest.raises(UserError, match=error):
            task_spec(row)


def test_a_cancelled_step_marks_the_env_unhealthy_and_a_cancelled_start_leaks_nothing(
    monkeypatch,
):
    async def main():
        before = set(java_children())
        env = ScienceWorldEnv()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(env.start(), 0.05)  # the JVM is still starting
        await env.close()
        # the start thread stops its JVM when it comes up: 60 s, as a loaded 2-core machine
        # took over 10 s to bring one up (the test failed there with a 10-s wait)
        for _ in range(600):
            if set(java_children()) == before:
                break
            await asyncio.sleep(0.1)
        assert set(java_children()) == before

        env = ScienceWorldEnv()
        await env.start()
        await env.reset(FIND)
        act, running = env._act, []

        def slow_act(action):
            running.append(action)
            assert len(running) == 1, "two calls ran at once on one JVM"
            time.sleep(0.3)
            try:
                return act(action)
            finally:
                running.pop()

        monkeypatch.setattr(env, "_act", slow_act)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(env.step("look around"), 0.05)
        assert not await env.healthy()  # the pool replaces it rather than reuse it
        assert (await env.step("inventory"))["observation"].startswith("In your inventory")
        await env.close()
        assert set(java_children()) == before

    asyncio.run(main())


def test_without_java_or_scienceworld_the_errors_say_what_to_install(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    sws.java_path.cache_clear()
    try:
        with pytest.raises(UserError, match="needs Java 17 or newer"):
            asyncio.run(ScienceWorldEnv().start())
    finally:
        sws.java_path.cache_clear()
    monkeypatch.setitem(sys.modules, "scienceworld", None)  # import scienceworld fails
    with pytest.raises(UserError, match=r"pip install 'agentfly-cli\[tasks\]'"):
        asyncio.run(ScienceWorldEnv().start())


def test_spec_is_heavy_and_pooled_small():
    assert SCIENCEWORLD.pool_max <= 8 and SCIENCEWORLD.start_timeout >= 60
    assert SCIENCEWORLD.resources["memory_mb"] >= 256


# -- the reward ------------------------------------------------------------------------------
def _call(name, observation, status="ok"):
    return {"name": name, "arguments": {}, "observation": observation, "status": status}


def _rendered(score, **state):
    result = {"observation": "x", "score": score, "won": score >= 100, "failed": score < 0}
    return render({"done": result["won"] or result["failed"], **result, **state}).observation


@pytest.mark.parametrize(
    ("calls", "expected", "extras"),
    [
        ([], 0.0, {"calls": 0}),  # never acted
        ([_call("sw_act", _rendered(25))], 0.25, {"score": 25}),
        ([_call("sw_act", _rendered(25)), _call("sw_look", _rendered(67))], 0.67, {"calls": 2}),
        ([_call("sw_act", _rendered(100))], 1.0, {"won": True}),
        ([_call("sw_act", _rendered(-100))], 0.0, {"failed": True, "score": -100}),
        # errors, other tools and lines that are not the last line do not count
        ([_call("sw_act", _rendered(50)), _call("sw_act", "Score: 100/100.", "error")], 0.5, {}),
        ([_call("sw_act", _rendered(50)), _call("calculator", "Score: 100/100.")], 0.5, {}),
        ([_call("sw_act", "Score: 100/100.\nthe end")], 0.0, {"calls": 0}),
        ([_call("sw_actions", "focus on air")], 0.0, {}),
    ],
)
def test_reward_is_the_last_reported_score_over_100(calls, expected, extras):
    result = asyncio.run(scienceworld_score.score(None, {"tool_calls": calls}, {}))
    assert not result.failed, result.error
    assert result.reward == expected
    assert extras.items() <= result.extras.items()


def test_reward_reads_a_truncated_observation_by_its_tail():
    from agentfly_cli.components.tools import truncate_observation

    long, _ = truncate_observation("a room\n" * 500 + "The task is complete. Score: 100/100.", 300)
    assert final_score({"tool_calls": [_call("sw_act", long)]})["won"] is True


# -- rollouts and training through the CLI -----------------------------------------------------
def test_scripted_policy_gets_max_and_min_reward(tiny_model, tmp_path, sim):
    rows = [FIND, LIVING, LIFESPAN]
    solve = gold(sim, FIND)
    script = [
        {"responses": [f"ACTION: {a}" for a in solve]},  # ScienceWorld's gold path: solved
        {"responses": ["ACTION: look around", "ACTION: focus on air"]},  # a wrong focus: failed
        {"responses": ["I do not know."]},  # never acts
    ]
    before = set(java_children())
    trajectories = scripted_rollout(
        "scienceworld", tiny_model, tmp_path, script, rows, "--n", "2", *SMALL_RUN
    )
    assert len(trajectories) == 6
    for trajectory in trajectories:
        trajectory.check()
        assert "error" not in trajectory.reward_extras
    assert [t.reward for t in trajectories] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert [t.finish_reason for t in trajectories[::2]] == ["terminal_tool"] * 2 + ["answer"]
    assert trajectories[0].reward_extras["won"] and trajectories[2].reward_extras["failed"]
    assert set(java_children()) == before  # every JVM of the run stopped


def test_tiny_model_rollout_gives_valid_trajectories(tiny_model, tmp_path):
    check_tiny_model_rollout("scienceworld", tiny_model, tmp_path, *SMALL_ENVS)


def test_short_training_run_completes(tiny_model, tmp_path):
    check_short_training_run("scienceworld", tiny_model, tmp_path, *SMALL_ENVS)


def test_every_row_has_a_gold_path_without_numbered_answers():
    """The warm start plays ``solution``; an answer to an ambiguity prompt by number would mean
    another object in another JVM, so the data script never stores one."""
    for row in ROWS:
        assert 1 <= len(row["solution"]) <= 8, row["id"]  # teleporting, not walking
        assert all(isinstance(a, str) and a and not a.strip().isdigit() for a in row["solution"])


def test_the_default_warm_start_plays_gold_paths_to_the_full_score(tiny_model, tmp_path):
    """Stored gold paths replayed in a fresh JVM (not the one that planned them) score 1.0."""
    flags = (*SMALL_ENVS, "--set", "rollout.max_total_tokens=16384", *TINY_TURN)  # later wins
    chains = check_warm_start_plays_solutions("scienceworld", tiny_model, tmp_path, 3, *flags)
    for chain in chains:
        solution = next(r["solution"] for r in ROWS if r["id"] == chain.task["id"])
        assert [c.arguments["action"] for c in chain.tool_calls] == solution


def test_all_tools_through_json_tool_calls(tiny_model, tmp_path, sim):
    solve = gold(sim, LIFESPAN)
    script = [
        {
            "responses": [
                json_call("sw_task"),
                json_call("sw_look"),
                json_call("sw_actions", contains="focus"),
                json_call("sw_inventory"),
                *(json_call("sw_act", action=a) for a in solve),
            ]
        }
    ]
    (trajectory,) = scripted_rollout(
        "scienceworld", tiny_model, tmp_path, script, [LIFESPAN],
        "--tools", "sw_act,sw_look,sw_inventory,sw_task,sw_actions", "--parser", "hermes",
        "--n", "1", *SMALL_RUN, "--set", "rollout.stop=[]", "--set", "rollout.max_turns=20",
    )  # fmt: skip
    names = [c.name for c in trajectory.tool_calls]
    assert names[:4] == ["sw_task", "sw_look", "sw_actions", "sw_inventory"]
    assert all(c.status == "ok" for c in trajectory.tool_calls)
    assert "focus on" in trajectory.tool_calls[2].observation
    assert trajectory.finish_reason == "terminal_tool" and trajectory.reward == 1.0


def test_a_jvm_that_does_not_start_is_a_clear_error():
    before = set(java_children())
    with pytest.raises(
        RuntimeError, match=r"JVM did not start \(Unrecognized option: -Xnonsense\)"
    ):
        asyncio.run(ScienceWorldEnv(java_options=["-Xnonsense"]).start())
    assert set(java_children()) == before
