"""The ``textworld`` recipe: packaged games, the env and its tools, the replayed score reward,
scripted and tiny-model rollouts, and a short training run."""

from __future__ import annotations

import asyncio
import json
import sys
import tarfile
import time

import pytest

from agentfly_cli.errors import UserError
from tests.helpers.recipe_checks import (
    SOLUTION_ROWS,
    TINY_TURN,
    budget,
    check_packaged_solutions_score,
    check_short_training_run,
    check_tiny_model_rollout,
    check_warm_start_plays_solutions,
    json_call,
    needs_smollm2,
    scripted_rollout,
)

pytest.importorskip("textworld", reason="textworld is not installed (pip install textworld)")

from envs_builtin import textworld_env as twe  # noqa: E402
from envs_builtin.textworld_env import (  # noqa: E402
    TextWorldEnv,
    clean_text,
    tw_act,
    tw_commands,
    tw_inventory,
    tw_look,
)
from rewards_builtin.textworld import replay_commands, textworld_score  # noqa: E402

# TextWorld silences this jericho warning at import; pytest's per-test filters bring it back.
pytestmark = pytest.mark.filterwarnings("ignore:Unable to find valid actions")
DATA = twe.ARCHIVE.with_name("textworld.jsonl")
ROWS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
EASY = next(r for r in ROWS if r["level"] == "easy")
HARD = next(r for r in ROWS if r["level"] == "hard")
# The hard game's walkthrough up to its first goal (of two): half the score.
FIRST_GOAL = HARD["walkthrough"][
    : 1 + next(i for i, c in enumerate(HARD["walkthrough"]) if c.startswith(("put", "insert")))
]
SMALL_RUN = [
    "--set", "rollout.max_tokens_per_turn=64",  # the tiny BPE tokenizer spends more tokens
    "--set", "rollout.max_total_tokens=4096",
]  # fmt: skip


def maps_of_libfrotz() -> int:
    with open("/proc/self/maps") as maps:
        return sum("libfrotz" in line for line in maps)


# -- data ----------------------------------------------------------------------------------------
def test_every_packaged_game_can_be_won_within_the_recipe_turn_limit():
    """A game whose walkthrough outlasts ``rollout.max_turns`` could never score 1.0 (the slow
    test plays them; this catches it in make test)."""
    from agentfly_cli.recipes.loader import load_config

    max_turns = load_config("textworld").rollout.max_turns
    longest = max(ROWS, key=lambda r: len(r["walkthrough"]))
    assert len(longest["walkthrough"]) <= max_turns, (longest["id"], len(longest["walkthrough"]))


def test_packaged_tasks_name_packaged_games_and_their_walkthroughs_win():
    with tarfile.open(twe.ARCHIVE) as archive:
        names = set(archive.getnames())
    assert len(ROWS) >= 32 and len({r["id"] for r in ROWS}) == len(ROWS)
    for row in ROWS:
        assert {row["game"], row["game"].replace(".z8", ".json")} <= names
        assert row["question"].startswith(row["objective"])
        assert row["max_score"] == (4 if row["level"] == "hard" else 2)

    async def won(row):
        from rewards_builtin.textworld import replay

        state = await replay(row["game"], row["walkthrough"])
        return state["won"] and state["score"] == row["max_score"]

    async def all_won():
        return [await won(row) for row in ROWS]

    assert all(asyncio.run(all_won()))


def test_games_unpack_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTFLY_CACHE", str(tmp_path))
    archive = tmp_path / "games.tar.xz"
    archive.write_bytes(twe.ARCHIVE.read_bytes())
    folder = twe.packaged_games(archive)
    assert folder.parent == tmp_path / "textworld" and (folder / EASY["game"]).is_file()
    assert twe.packaged_games(archive) == folder
    twe._unpacked.clear()  # a new process finds the folder and reuses it
    assert twe.packaged_games(archive) == folder
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no leftovers


def test_resolve_game_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="'game' field"):
        twe.resolve_game(None)
    with pytest.raises(twe.GameFileError, match="'nope.z8' not found"):
        twe.resolve_game("nope.z8")
    assert twe.resolve_game(EASY["game"]).is_file()
    assert twe.resolve_game(str(twe.resolve_game(EASY["game"]))).is_absolute()


def test_clean_text_drops_banner_prompt_and_end_menu():
    raw = (
        "  ____  \n |  $$ |\n\nYour task is to: win.\n\n\n\n-= Office =-\nA desk.\n\n>"
        "          -= Office =-0/1"
    )
    assert clean_text(raw) == "Your task is to: win.\n\n-= Office =-\nA desk."
    end = (
        "You put the pen on the desk.\n\n\n  *** The End ***\n\nYou scored 1 out of a possible "
        "1, in 3 turns.\n\n\nWould you like to RESTART, RESTORE a saved game, QUIT or UNDO the "
        "last command?\n>   -= Office =-0/3"
    )
    assert clean_text(end) == "You put the pen on the desk."


# -- the env and its tools -----------------------------------------------------------------------
async def _play_easy_game():
    env = TextWorldEnv()
    await env.start()
    first = await env.reset(EASY)
    assert first["observation"] == EASY["question"] and first["score"] == 0
    assert not first["done"] and first["max_score"] == 2
    # The game's own answer to a command it does not know; nothing breaks, no score.
    odd = await tw_act(env=env, command="xyzzy")
    assert odd.ok and "not a verb" in odd.observation and "Score: 0/2." in odd.observation
    take, put = EASY["walkthrough"]
    took = await tw_act(env=env, command=take)  # a point for holding the goal object
    assert took.observation.startswith("You take") and "Score: 1/2." in took.observation
    inventory = await tw_inventory(env=env)  # state carries across steps
    assert "You are carrying" in inventory.observation
    assert take.split(" from ")[0].removeprefix("take ") in inventory.observation
    assert "-= " in (await tw_look(env=env)).observation
    admissible = (await tw_commands(env=env)).observation.splitlines()
    assert put in admissible and "look" in admissible
    won = await tw_act(env=env, command=put)
    assert won.terminal and "Score: 2/2. You won" in won.observation
    after = await tw_act(env=env, command="look")  # the game is over: it is not stepped
    assert after.terminal and after.observation.startswith("The game is over.")
    assert (await tw_commands(env=env)).observation.startswith("(no commands")
    return env


def test_env_plays_a_game_across_steps_and_ends_when_won():
    async def main():
        env = await _play_easy_game()
        state = await env.step({"op": "state"})
        assert state["won"] and state["done"] and state["score"] == 2
        await env.close()
        await env.close()  # twice is fine
        assert not await env.healthy()

    asyncio.run(main())


def test_show_commands_lists_the_valid_commands_after_each_step():
    async def main():
        env = TextWorldEnv(show_commands=True)
        await env.start()
        first = await env.reset(EASY)
        assert EASY["walkthrough"][0] in first["admissible_commands"]
        take = await tw_act(env=env, command=EASY["walkthrough"][0])
        listed = take.observation.split("Valid commands: ")[1]
        assert EASY["walkthrough"][1] in listed and "inventory" in listed
        won = await tw_act(env=env, command=EASY["walkthrough"][1])
        assert "Valid commands" not in won.observation
        await env.close()

    asyncio.run(main())


def test_bad_actions_are_clear_errors():
    async def main():
        env = TextWorldEnv()
        await env.start()
        with pytest.raises(RuntimeError, match="no game is loaded"):
            await env.step("look")
        with pytest.raises(ValueError, match="'game' field"):
            await env.reset({"question": "no game here"})
        await env.reset(EASY)
        for action, error in (
            ({"command": "  "}, "give a game command"),
            ({"command": "look\nlook"}, "one command per call"),
            ({"command": "x" * 500}, "longer than"),
            ({"op": "fly"}, "unknown op"),
            (42, "command string"),
        ):
            with pytest.raises((ValueError, TypeError), match=error):
                await env.step(action)
        empty = await tw_act(env=env, command=" ")  # through the tool: an error observation
        assert empty.status == "error" and "give a game command" in empty.observation
        await env.close()
        with pytest.raises(RuntimeError, match="closed"):
            await env.step("look")

    asyncio.run(main())


def test_without_textworld_env_and_reward_say_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)  # import textworld fails
    with pytest.raises(UserError, match=r"pip install 'agentfly-cli\[tasks\]'"):
        asyncio.run(TextWorldEnv().start())
    result = asyncio.run(textworld_score.score(None, {"tool_calls": []}, EASY))
    assert result.failed and "pip install 'agentfly-cli[tasks]'" in result.error


def test_a_cancelled_step_marks_the_env_unhealthy_and_never_overlaps(monkeypatch):
    async def main():
        env = TextWorldEnv()
        await env.start()
        await env.reset(EASY)
        step, running = env._step, []

        def slow_step(command):
            running.append(command)
            assert len(running) == 1, "two calls ran at once on one game"
            time.sleep(0.2)
            try:
                return step(command)
            finally:
                running.pop()

        monkeypatch.setattr(env, "_step", slow_step)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(env.step("look"), 0.05)
        assert not await env.healthy()  # the pool replaces it rather than reuse it
        assert (await env.step("inventory"))["observation"].startswith("You are carrying")
        await env.close()

    asyncio.run(main())


def test_reset_switches_games_and_frees_them():
    async def main():
        before = maps_of_libfrotz()
        env = TextWorldEnv()
        await env.start()
        for row in ROWS[:6]:
            state = await env.reset(row)
            assert state["observation"] == row["question"]
            assert env.game_file is not None and env.game_file.name == row["game"]
        assert (await env.step("look"))["observation"].startswith("-= ")
        assert await env.reset(None) is None  # clean up for reuse: the game is freed
        assert env.game_file is None and maps_of_libfrotz() == before
        with pytest.raises(RuntimeError, match="no game"):
            await env.step("look")
        assert await env.healthy()
        await env.reset(EASY)
        await env.close()
        assert maps_of_libfrotz() == before

    asyncio.run(main())


def test_many_envs_load_and_play_concurrently():
    """TextWorld's loader is not thread-safe; the env serialises every call into it."""

    async def play(row):
        env = TextWorldEnv()
        await env.start()
        try:
            await env.reset(row)
            for command in row["walkthrough"]:
                state = await env.step(command)
            return state["won"]
        finally:
            await env.close()

    async def main():
        return await asyncio.gather(*(play(row) for row in ROWS[:8]))

    assert all(asyncio.run(main()))


# -- the reward ------------------------------------------------------------------------------
def _call(name, arguments, status="ok"):
    return {"name": name, "arguments": arguments, "status": status}


def test_replay_commands_reads_successful_stepping_calls_in_order():
    trajectory = {
        "tool_calls": [
            _call("tw_act", {"command": "open box"}),
            _call("tw_look", {}),
            _call("tw_act", '{"command": "take pen from box"}'),  # JSON text
            _call("tw_act", "go west"),  # plain text (ReAct)
            _call("tw_act", {"command": "dance"}, status="error"),  # never reached the game
            _call("tw_commands", {}),  # does not move the game
            _call("tw_inventory", {}),
            _call("calculator", {"expression": "1+1"}),
        ]
    }
    assert replay_commands(trajectory) == [
        "open box", "look", "take pen from box", "go west", "inventory",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("row", "commands", "expected"),
    [
        (EASY, EASY["walkthrough"], 1.0),
        (EASY, [], 0.0),
        (EASY, EASY["walkthrough"][:1], 0.5),  # holding the object: one point of two
        (EASY, ["xyzzy", "look", "inventory"], 0.0),
        (HARD, HARD["walkthrough"], 1.0),
        (HARD, FIRST_GOAL, 0.5),
        (EASY, [*EASY["walkthrough"], "take everything", "dance"], 1.0),  # after the end: ignored
    ],
)
def test_reward_is_the_replayed_score_over_the_maximum(row, commands, expected):
    trajectory = {"tool_calls": [_call("tw_act", {"command": c}) for c in commands]}
    result = asyncio.run(textworld_score.score(None, trajectory, row))
    assert not result.failed, result.error
    assert result.reward == expected
    assert result.extras["max_score"] == row["max_score"]


def test_reward_without_a_game_field_fails_clearly():
    result = asyncio.run(textworld_score.score(None, {"tool_calls": []}, {"question": "?"}))
    assert result.failed and "needs dataset field(s) 'game'" in result.error


# -- rollouts and training through the CLI -----------------------------------------------------
def test_scripted_policy_gets_max_and_min_reward(tiny_model, tmp_path):
    rows = [EASY, EASY, HARD]
    script = [
        {"responses": [f"ACTION: {c}" for c in EASY["walkthrough"]]},  # solves it
        {"responses": ["ACTION: look", "ACTION: eat the desk", "I give up."]},  # fails
        {"responses": [f"ACTION: {c}" for c in FIRST_GOAL] + ["ACTION: dance", "I give up."]},
    ]
    trajectories = scripted_rollout(
        "textworld", tiny_model, tmp_path, script, rows,
        "--n", "2", *SMALL_RUN,
    )  # fmt: skip
    assert len(trajectories) == 6
    for trajectory in trajectories:
        trajectory.check()
        assert "error" not in trajectory.reward_extras
    assert [t.reward for t in trajectories] == [1.0, 1.0, 0.0, 0.0, 0.5, 0.5]
    assert [t.finish_reason for t in trajectories[::2]] == ["terminal_tool", "answer", "answer"]
    assert trajectories[0].reward_extras["won"] is True


def test_env_runs_in_child_processes(tiny_model, tmp_path):
    script = [{"responses": [f"ACTION: {c}" for c in EASY["walkthrough"]]}]
    trajectories = scripted_rollout(
        "textworld", tiny_model, tmp_path, script, [EASY],
        "--n", "2", *SMALL_RUN, "--set", "envs.textworld.provider=process",
    )  # fmt: skip
    assert [t.reward for t in trajectories] == [1.0, 1.0]


def test_tiny_model_rollout_gives_valid_trajectories(tiny_model, tmp_path):
    check_tiny_model_rollout("textworld", tiny_model, tmp_path, *budget(4096))


def test_short_training_run_completes(tiny_model, tmp_path):
    check_short_training_run("textworld", tiny_model, tmp_path, *budget(4096))


def test_the_default_warm_start_plays_the_walkthroughs_of_training_games(tiny_model, tmp_path):
    chains = check_warm_start_plays_solutions(
        "textworld", tiny_model, tmp_path, 3, *budget(8192), *TINY_TURN
    )
    for chain in chains:
        walkthrough = next(r["walkthrough"] for r in ROWS if r["id"] == chain.task["id"])
        assert [c.arguments["command"] for c in chain.tool_calls] == walkthrough


def test_all_four_tools_through_json_tool_calls(tiny_model, tmp_path):
    take, put = EASY["walkthrough"]
    script = [
        {
            "responses": [
                json_call("tw_look"),
                json_call("tw_commands"),
                json_call("tw_act", command=take),
                json_call("tw_inventory"),
                json_call("tw_act", command=put),
            ]
        }
    ]
    (trajectory,) = scripted_rollout(
        "textworld", tiny_model, tmp_path, script, [EASY],
        "--tools", "tw_act,tw_look,tw_inventory,tw_commands", "--parser", "hermes",
        "--n", "1", *SMALL_RUN, "--set", "rollout.stop=[]",
    )  # fmt: skip
    assert [c.name for c in trajectory.tool_calls] == [
        "tw_look", "tw_commands", "tw_act", "tw_inventory", "tw_act",
    ]  # fmt: skip
    assert all(c.status == "ok" for c in trajectory.tool_calls)
    assert take in trajectory.tool_calls[1].observation.splitlines()
    assert trajectory.finish_reason == "terminal_tool" and trajectory.reward == 1.0
    assert trajectory.reward_extras["moves"] == 4  # look, take, inventory, put


@needs_smollm2
@pytest.mark.parametrize("limit", SOLUTION_ROWS)
def test_every_packaged_walkthrough_scores_under_the_recipe_settings(tmp_path, limit):
    script = [{"responses": [f"ACTION: {c}" for c in r["walkthrough"]]} for r in ROWS]
    check_packaged_solutions_score("textworld", script, tmp_path, limit)
