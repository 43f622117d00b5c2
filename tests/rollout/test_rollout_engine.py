"""The rollout engine with the scripted backend: turn state machine, stop conditions, records."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.components.tools import tool
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.settings.chat import ObservationSettings
from agentfly_cli.settings.rollout import RolloutSettings
from agentfly_cli.trajectory import Trajectory, read_trajectories, write_trajectories
from rewards_builtin.text import math_equal
from tools_builtin.answer import answer
from tools_builtin.calculator import calculator


def call(tool_name: str, /, **arguments) -> str:
    payload = {"name": tool_name, "arguments": arguments}
    return "<tool_call>\n" + json.dumps(payload) + "\n</tool_call>"


@pytest.fixture(scope="module")
def chat(tiny_model) -> ChatTemplate:
    return ChatTemplate.load(str(tiny_model))


def make_engine(chat, script, tools=(calculator, answer), reward=math_equal, **settings):
    options = {"n": 1, "max_turns": 4, "seed": 0}
    options.update(settings)
    return RolloutEngine(
        ScriptedBackend(script, chat),
        chat,
        get_parser("hermes"),
        list(tools),
        reward,
        RolloutSettings(**options),
    )


def run(engine, tasks):
    return asyncio.run(engine.run(tasks))


def rendered_ids(chat: ChatTemplate, trajectory: Trajectory, tools) -> list[int]:
    """The template's own tokenization of the final conversation (raw assistant text)."""
    messages = []
    for message in trajectory.messages:
        message = {k: v for k, v in message.items() if k not in ("tool_calls", "reasoning_content")}
        messages.append(message)
    # the last turn's observation has no tokens: no turn follows it
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    text = chat.render_text(messages, [t.schema for t in tools])
    rendered = chat.tokenizer(text, add_special_tokens=False)["input_ids"]
    # the template closes the last turn with text after its end-of-turn token ("\n" in
    # ChatML) that no model samples: it belongs to the next turn's tokens
    tail = rendered[len(trajectory.ids) :]
    assert chat.decode(tail).strip() == "", chat.decode(tail)
    return rendered[: len(trajectory.ids)]


def test_two_turn_calculator_chain_is_token_exact(chat):
    script = [[call("calculator", expression="2 + 3"), call("answer", answer="5")]]
    engine = make_engine(chat, script)
    [trajectory] = run(engine, [{"question": "What is 2 + 3?", "answer": "5"}])
    trajectory.check()
    assert trajectory.finish_reason == "terminal_tool"
    assert trajectory.prediction == "5"
    assert trajectory.reward == 1.0
    assert [c.name for c in trajectory.tool_calls] == ["calculator", "answer"]
    assert trajectory.tool_calls[0].observation == "5"
    assert [t.role for t in trajectory.turns] == ["prompt", "assistant", "observation", "assistant"]
    # chatml-tools is prefix-preserving: the record equals the template's own rendering
    assert trajectory.ids == rendered_ids(chat, trajectory, (calculator, answer))
    sampled = [chat.encode_response(text) for text in script[0]]
    assert trajectory.sampled_ids == sampled[0] + sampled[1]
    assert trajectory.messages[-2]["tool_calls"][0]["function"]["name"] == "answer"


def test_final_answer_without_tool_call_ends_the_chain(chat):
    engine = make_engine(chat, [["It is 12."]])
    [trajectory] = run(engine, [{"question": "What is 3 * 4?", "answer": "12"}])
    trajectory.check()
    assert trajectory.finish_reason == "answer"
    assert trajectory.prediction == "It is 12."
    assert trajectory.num_turns == 1


def test_malformed_call_becomes_an_error_observation_and_rollout_goes_on(chat):
    script = [["<tool_call>{not json</tool_call>", call("answer", answer="1")]]
    engine = make_engine(chat, script)
    [trajectory] = run(engine, [{"question": "q", "answer": "1"}])
    trajectory.check()
    assert trajectory.finish_reason == "terminal_tool"
    first = trajectory.tool_calls[0]
    assert first.status == "error" and first.error_kind == "parse_error"
    assert first.observation in trajectory.messages[2]["content"]


def test_unknown_tool_and_bad_arguments_are_error_observations(chat):
    script = [[call("nosuch", x=1), call("calculator", expr="1"), call("answer", answer="1")]]
    engine = make_engine(chat, script)
    [trajectory] = run(engine, [{"question": "q", "answer": "1"}])
    kinds = [c.error_kind for c in trajectory.tool_calls]
    assert kinds[:2] == ["unknown_tool", "invalid_arguments"]
    assert "available tools are: answer, calculator" in trajectory.tool_calls[0].observation
    assert trajectory.finish_reason == "terminal_tool"


def test_max_turns_stops_the_chain(chat):
    script = [[call("calculator", expression="1+1")] * 5]
    [trajectory] = run(make_engine(chat, script, max_turns=2), [{"question": "q", "answer": "2"}])
    trajectory.check()
    assert trajectory.finish_reason == "max_turns"
    assert trajectory.num_turns == 2
    # the last turn's observation is recorded as a message and tool call, with no tokens
    assert trajectory.turns[-1].role == "assistant"
    assert trajectory.messages[-1]["role"] == "tool"


def test_token_budget_is_recorded_as_length_never_cut_silently(chat):
    long_text = "the quick brown fox jumps over the lazy dog " * 20
    tools = [calculator.schema, answer.schema]
    prompt = len(chat.render_prompt([{"role": "user", "content": "q"}], tools))
    engine = make_engine(chat, [[long_text]], max_total_tokens=prompt + 40)
    [trajectory] = run(engine, [{"question": "q", "answer": "1"}])
    trajectory.check()
    assert trajectory.finish_reason == "length"
    assert len(trajectory.ids) == prompt + 40
    assert len(chat.encode_response(long_text)) > 40
    assert trajectory.turns[-1].finish_reason == "length"


def test_observation_that_overflows_the_budget_ends_with_length(chat):
    script = [[call("calculator", expression="1+1"), call("answer", answer="2")]]
    engine = make_engine(chat, script)
    [full] = run(engine, [{"question": "q", "answer": "2"}])
    # a budget that fits the first turn but not the observation after it
    budget = full.turns[1].end + 3
    [cut] = run(make_engine(chat, script, max_total_tokens=budget), [{"question": "q"}])
    cut.check()
    assert cut.finish_reason == "length"
    assert len(cut.ids) == full.turns[1].end


def test_error_budget_stops_the_chain(chat):
    script = [[call("nosuch")] * 6]
    engine = make_engine(chat, script, max_errors=2, max_turns=6)
    [trajectory] = run(engine, [{"question": "q", "answer": "1"}])
    assert trajectory.finish_reason == "errors"
    assert trajectory.num_turns == 2


def test_groups_share_a_group_id_and_order_is_by_task_then_sample(chat):
    script = [[call("answer", answer="1")], [call("answer", answer="2")]]
    engine = make_engine(chat, script, n=3)
    trajectories = run(engine, [{"question": "a", "answer": "1"}, {"question": "b", "answer": "3"}])
    assert [(t.task_index, t.sample_index) for t in trajectories] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
    ]
    assert len({t.group_id for t in trajectories[:3]}) == 1
    assert trajectories[0].group_id != trajectories[3].group_id
    assert [t.reward for t in trajectories] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_tool_calls_of_one_turn_run_concurrently(chat):
    arrived = []
    both = asyncio.Event()

    @tool
    async def meet(name: str) -> str:
        """Wait until the other call of the turn has started too."""
        arrived.append(name)
        if len(arrived) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)
        return f"met {name}"

    turn = call("meet", name="a") + "\n" + call("meet", name="b")
    engine = make_engine(chat, [[turn, "done"]], tools=(meet,))
    [trajectory] = run(engine, [{"question": "q", "answer": "x"}])
    assert [c.observation for c in trajectory.tool_calls] == ["met a", "met b"]
    # both results come back in one observation turn
    assert [m["role"] for m in trajectory.messages[-3:-1]] == ["tool", "tool"]


def test_rewards_are_scored_as_each_chain_finishes(chat):
    release = asyncio.Event()
    order = []

    @tool
    async def slow(x: int) -> str:
        """Waits until the quick chain has been scored."""
        await asyncio.wait_for(release.wait(), 5)
        return "ok"

    script = [["quick answer"], [call("slow", x=1), "slow answer"]]
    engine = make_engine(chat, script, tools=(slow,))

    def finished(trajectory):
        order.append(trajectory.task_index)
        assert trajectory.reward is not None
        release.set()

    async def go():
        return await engine.run(
            [{"question": "a", "answer": "quick"}, {"question": "b", "answer": "x"}],
            on_finish=finished,
        )

    trajectories = asyncio.run(go())
    assert order == [0, 1]
    assert trajectories[1].tool_calls[0].status == "ok"


def test_concurrency_bound_limits_chains_in_flight(chat):
    in_flight = 0
    peak = 0

    @tool
    async def hold(x: int) -> str:
        """Counts chains that are running at once."""
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return "ok"

    script = [[call("hold", x=1), "done"]] * 12
    engine = make_engine(chat, script, tools=(hold,), concurrency=3)
    run(engine, [{"question": str(i), "answer": "done"} for i in range(12)])
    assert peak == 3


def test_backend_failure_aborts_only_that_chain(chat):
    script = [[call("answer", answer="1")]]  # task 1 has no script line
    engine = make_engine(chat, script)
    good, bad = run(engine, [{"question": "a", "answer": "1"}, {"question": "b", "answer": "1"}])
    assert good.finish_reason == "terminal_tool"
    assert bad.finish_reason == "abort"
    assert "the script has 1 lines" in bad.error
    assert bad.reward == 0.0


def test_env_tools_keep_state_within_a_chain_and_not_across(chat):
    from agentfly_cli.plugin_host.plugins import get_plugin_host
    from envs_builtin.scratchpad import notes_list, notes_write

    spec = get_plugin_host().components.envs.get("scratchpad")
    script = [
        [call("notes_write", key="a", text="x"), call("notes_list")],
        [call("notes_write", key="b", text="y"), call("notes_list")],
    ]
    engine = RolloutEngine(
        ScriptedBackend(script, chat),
        chat,
        get_parser("hermes"),
        [notes_write, notes_list],
        None,
        RolloutSettings(n=1, max_turns=2),
        env_specs={"scratchpad": spec},
    )
    trajectories = run(engine, [{"question": "a"}, {"question": "b"}])
    for trajectory, key in zip(trajectories, "ab", strict=True):
        assert trajectory.tool_calls[0].status == "ok"
        assert trajectory.tool_calls[1].observation == key


def test_missing_env_spec_is_reported(chat):
    from envs_builtin.scratchpad import notes_write

    with pytest.raises(ValueError, match="scratchpad"):
        RolloutEngine(ScriptedBackend([], chat), chat, get_parser("hermes"), [notes_write])


def test_worked_examples_and_system_prompt_come_before_the_task(chat):
    examples = [
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": call("calculator", expression="1 + 1")},
        {"role": "tool", "content": "2"},
        {"role": "assistant", "content": call("answer", answer="2")},
    ]
    engine = RolloutEngine(
        ScriptedBackend([["4"]], chat),
        chat,
        get_parser("hermes"),
        [calculator],
        None,
        RolloutSettings(n=1),
        system_prompt="Solve {question} carefully.",
        examples=examples,
    )
    [trajectory] = run(engine, [{"question": "What is 2 + 2?"}])
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert trajectory.messages[0]["content"] == "Solve What is 2 + 2? carefully."
    prompt = chat.decode(trajectory.ids[: trajectory.turns[0].end])
    assert prompt.index("What is 1 + 1?") < prompt.rindex("What is 2 + 2?")
    assert "<tool_response>\n2\n</tool_response>" in prompt


def test_line_protocol_with_user_observations(tiny_model):
    chat = ChatTemplate.load(
        str(tiny_model),
        observation=ObservationSettings(role="user", template="RESULT: {observation}"),
    )
    parser = get_parser(
        "line",
        {
            "commands": {
                "CALC": {"tool": "calculator", "argument": "expression"},
                "ANSWER": {"tool": "answer", "argument": "answer"},
            }
        },
    )
    engine = RolloutEngine(
        ScriptedBackend([["CALC: 6 * 7", "ANSWER: 42"]], chat),
        chat,
        parser,
        [calculator, answer],
        math_equal,
        RolloutSettings(n=2),
    )
    trajectories = run(engine, [{"question": "What is 6 * 7?", "answer": "42"}])
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.reward == 1.0
        assert trajectory.messages[2] == {"role": "user", "content": "RESULT: 42"}
        assert trajectory.ids == rendered_ids(chat, trajectory, (calculator, answer))


def test_trajectory_jsonl_round_trip_and_tamper_check(chat, tmp_path):
    script = [[call("calculator", expression="2+2"), call("answer", answer="4")]]
    trajectories = run(make_engine(chat, script, n=2), [{"question": "q", "answer": "4"}])
    path = tmp_path / "t.jsonl"
    assert write_trajectories(path, trajectories) == 2
    again = read_trajectories(path)
    assert [t.to_dict() for t in again] == [t.to_dict() for t in trajectories]
    for trajectory in again:
        trajectory.check()
    again[0].loss_mask[0] = 1
    with pytest.raises(ValueError):
        again[0].check()
    line = json.loads(path.read_text().splitlines()[0])
    for key in (
        "ids",
        "loss_mask",
        "logprobs",
        "turns",
        "messages",
        "tool_calls",
        "reward",
        "reward_extras",
        "finish_reason",
        "group_id",
        "task",
    ):
        assert key in line
    assert line["tool_calls"][0]["latency_s"] > 0


def test_calls_of_one_turn_share_one_env(chat):
    """Two calls in one turn that need the same env get the same (started once) env."""
    from agentfly_cli.plugin_host.plugins import get_plugin_host
    from envs_builtin.scratchpad import notes_list, notes_write

    spec = get_plugin_host().components.envs.get("scratchpad")
    both = call("notes_write", key="a", text="x") + "\n" + call("notes_write", key="b", text="y")
    engine = RolloutEngine(
        ScriptedBackend([[both, call("notes_list")]], chat),
        chat,
        get_parser("hermes"),
        [notes_write, notes_list],
        None,
        RolloutSettings(n=1, max_turns=2),
        env_specs={"scratchpad": spec},
    )
    [trajectory] = run(engine, [{"question": "q"}])
    assert [c.status for c in trajectory.tool_calls] == ["ok", "ok", "ok"]
    assert trajectory.tool_calls[2].observation == "a\nb"


def test_an_env_that_fails_to_start_is_an_error_observation(chat):
    from agentfly_cli.envs.base import BaseEnv, EnvSpec

    class Broken(BaseEnv):
        async def start(self):
            raise RuntimeError("no sandbox here")

    @tool(env="broken")
    async def poke(env) -> str:
        """Touch the env."""
        return "never"

    engine = RolloutEngine(
        ScriptedBackend([[call("poke") + "\n" + call("calculator", expression="1+1"), "ok"]], chat),
        chat,
        get_parser("hermes"),
        [poke, calculator],
        None,
        RolloutSettings(n=1, max_turns=2),
        env_specs={"broken": EnvSpec(name="broken", factory=Broken)},
    )
    [trajectory] = run(engine, [{"question": "q"}])
    first, second = trajectory.tool_calls
    assert first.status == "error" and "no sandbox here" in first.observation
    assert second.status == "ok" and second.observation == "2"
    assert trajectory.finish_reason == "answer"


def test_an_env_misconfigured_for_every_chain_stops_the_rollout(chat):
    """A start failure that is the user's to fix (a UserError: a missing binary, a bad option)
    would fail every chain alike: the rollout stops with it, and no other chain is left running."""
    from agentfly_cli.envs.base import BaseEnv, EnvSpec
    from agentfly_cli.envs.pool import EnvConfigError
    from agentfly_cli.errors import UserError

    class Misconfigured(BaseEnv):
        async def start(self):
            raise UserError("engine not found at '/nope': set envs.misconfigured.options.path")

    @tool(env="misconfigured")
    async def poke(env) -> str:
        """Touch the env."""
        return "never"

    waits = []

    @tool
    async def wait() -> str:
        """Take a while."""
        waits.append(1)
        await asyncio.sleep(0.05)
        return "done"

    slow_chain = [call("wait")] * 40  # 40 turns of 50 ms unless cancelled
    engine = RolloutEngine(
        ScriptedBackend([slow_chain, [call("poke"), "ok"], slow_chain], chat),
        chat,
        get_parser("hermes"),
        [poke, wait],
        None,
        RolloutSettings(n=1, max_turns=40),
        env_specs={"misconfigured": EnvSpec(name="misconfigured", factory=Misconfigured)},
    )
    finished = []
    with pytest.raises(EnvConfigError) as caught:
        asyncio.run(
            engine.run([{"question": f"q{i}"} for i in range(3)], on_finish=finished.append)
        )
    assert isinstance(caught.value, UserError)
    assert str(caught.value) == (
        "env 'misconfigured' cannot start: engine not found at '/nope': "
        "set envs.misconfigured.options.path"
    )
    assert finished == [] and engine.live_states() == {"generating": 0, "running_tools": 0}
    assert len(waits) < 10  # the slow chains were cancelled, not run to their 2 x 40 calls


def test_live_states_follow_the_turn_state_machine(chat):
    seen = []
    engine = None

    @tool
    async def look(x: int) -> str:
        """Record what the engine reports while this tool runs."""
        seen.append(engine.live_states())
        return "ok"

    engine = make_engine(chat, [[call("look", x=1), "done"]] * 3, tools=(look,))
    run(engine, [{"question": str(i), "answer": "done"} for i in range(3)])
    assert seen and all(s["running_tools"] >= 1 for s in seen)
    assert engine.live_states() == {"generating": 0, "running_tools": 0}


class LineBackend(ScriptedBackend):
    """Replays each response's ids as sampled, ending on the newline token (no end-of-turn)."""

    async def generate(self, prompt_ids, params, context=None):
        generation = await super().generate(prompt_ids, params, context)
        text = self.chat.decode(generation.token_ids[:-1])  # drop the end-of-turn id
        ids = self.chat.encode_text(text + "\n")
        assert ids[-1] in params.stop_token_ids  # the newline ends the turn
        generation.token_ids = ids
        generation.logprobs = [-0.5] * len(ids)
        return generation


def test_turns_stopped_at_a_newline_are_closed_before_the_observation(chat):
    parser = get_parser(
        "line",
        {"commands": {"CALC": {"tool": "calculator", "argument": "expression"},
                      "ANSWER": {"tool": "answer", "argument": "answer"}}},
    )  # fmt: skip
    engine = RolloutEngine(
        LineBackend([["CALC: 2 + 3", "ANSWER: 5"]], chat),
        chat,
        parser,
        [calculator, answer],
        math_equal,
        RolloutSettings(n=1, max_turns=3, seed=0, stop=["\n"]),
    )
    newline_ids = set(chat.stop_token_ids(["\n"]))
    assert newline_ids and all("\n" in chat.decode([i]) for i in newline_ids)
    assert not newline_ids & set(chat.eot_token_ids)
    [trajectory] = run(engine, [{"question": "What is 2 + 3?", "answer": "5"}])
    trajectory.check()
    assert trajectory.finish_reason == "terminal_tool" and trajectory.reward == 1.0
    assistant, observation = trajectory.turns[1], trajectory.turns[2]
    assert trajectory.ids[assistant.end - 1] in newline_ids
    assert trajectory.ids[observation.start] == chat.eot_token_ids[0]  # closed, untrained
    assert trajectory.loss_mask[observation.start] == 0
    # the record reads as the template's rendering of the same conversation
    contents = [m["content"] for m in trajectory.messages]
    upto = contents.index("CALC: 2 + 3\n") + 2  # the call and its result
    messages = [{k: v for k, v in m.items() if k != "tool_calls"} for m in trajectory.messages]
    schemas = [calculator.schema, answer.schema]
    rendered = chat.render_text(messages[:upto], schemas, add_generation_prompt=True)
    assert chat.decode(trajectory.ids[: observation.end]) == rendered


# -- model output is data: caps, unread markup, parsing off the loop (issue 15) ----------------
LINE_COMMANDS = {
    "commands": {
        "CALC": {"tool": "calculator", "argument": "expression"},
        "ANSWER": {"tool": "answer", "argument": "answer"},
    }
}


def line_engine(chat, script, **settings):
    options = {"n": 1, "max_turns": 2, "seed": 0, **settings}
    return RolloutEngine(
        ScriptedBackend(script, chat),
        chat,
        get_parser("line", LINE_COMMANDS),
        [calculator, answer],
        math_equal,
        RolloutSettings(**options),
    )


def test_calls_over_the_per_turn_cap_are_one_counted_error_not_run(chat):
    from agentfly_cli.rollout.summary import summarize

    turn = "\n".join(f"CALC: {i} + 1" for i in range(2000))
    engine = line_engine(
        chat,
        [[turn, "ANSWER: 1"]],
        max_calls_per_turn=16,
        max_tokens_per_turn=50_000,
        max_total_tokens=60_000,
    )
    [trajectory] = run(engine, [{"question": "q", "answer": "1"}])
    trajectory.check()
    ran = [c for c in trajectory.tool_calls if c.name == "calculator"]
    assert [c.observation for c in ran] == [str(i + 1) for i in range(16)]
    capped = [c for c in trajectory.tool_calls if c.error_kind == "too_many_calls"]
    assert len(capped) == 1
    assert "made 2000 tool calls; only the first 16 ran" in capped[0].observation
    read = [m["content"] for m in trajectory.messages]
    assert capped[0].observation in read  # the model reads it
    assert len(trajectory.messages[1]["tool_calls"]) == 16  # the record names what ran
    assert trajectory.finish_reason == "terminal_tool"
    assert summarize([trajectory])["error_kinds"] == {"too_many_calls": 1}


def test_the_default_cap_is_a_rollout_setting():
    assert RolloutSettings().max_calls_per_turn == 16
    with pytest.raises(ValueError, match="max_calls_per_turn"):
        RolloutSettings(max_calls_per_turn=0)


def test_many_malformed_calls_are_capped_too(chat):
    turn = "<tool_call>{oops}</tool_call>" * 1000
    engine = make_engine(
        chat, [[turn]], max_calls_per_turn=4, max_turns=1, max_tokens_per_turn=50_000,
        max_total_tokens=60_000,
    )  # fmt: skip
    [trajectory] = run(engine, [{"question": "q"}])
    errors = [c for c in trajectory.tool_calls if c.error_kind == "parse_error"]
    assert len(errors) == 5 and "996 more malformed tool calls" in errors[-1].observation


@pytest.mark.parametrize(
    ("parser_name", "turn", "shown"),
    [
        ("line", call("calculator", expression="2 + 3"), "<tool_call"),
        ("hermes", '[TOOL_CALLS] [{"name": "calculator", "arguments": {}}]', "[TOOL_CALLS]"),
        ("hermes", '<tool_call >{"name": "calculator"}</tool_call >', "<tool_call"),
        ("hermes", '{"name": "calculator", "arguments": {"expression": "1"}}', '{"name"'),
    ],
)
def test_tool_call_markup_the_parser_does_not_read_is_an_unparsed_call(
    chat, parser_name, turn, shown
):
    from agentfly_cli.rollout.summary import summarize

    engine = RolloutEngine(
        ScriptedBackend([[turn, "The answer is 5."]], chat),
        chat,
        get_parser(parser_name, LINE_COMMANDS if parser_name == "line" else None),
        [calculator, answer],
        math_equal,
        RolloutSettings(n=1, max_turns=2),
    )
    [trajectory] = run(engine, [{"question": "q", "answer": "5"}])
    trajectory.check()
    [unparsed] = trajectory.tool_calls
    assert unparsed.error_kind == "unparsed_call" and unparsed.status == "error"
    assert shown in unparsed.observation and "no tool was called" in unparsed.observation
    assert unparsed.observation in trajectory.messages[2]["content"]
    assert trajectory.num_turns == 2 and trajectory.prediction == "The answer is 5."
    assert summarize([trajectory])["error_kinds"] == {"unparsed_call": 1}


def test_plain_answers_are_not_unparsed_calls(chat):
    turn = 'The tool result {"name": "Bob"} says 5, see <tool_response>.'
    [trajectory] = run(make_engine(chat, [[turn]]), [{"question": "q", "answer": "5"}])
    assert trajectory.finish_reason == "answer" and trajectory.tool_calls == []


class SlowParser:
    """A parser that holds its thread for a while, as a super-linear one would."""

    name = "slow"
    expected = ""

    def parse(self, text):
        import time

        from agentfly_cli.chat.parsers import ParsedResponse

        time.sleep(1.5)
        return ParsedResponse(text)


def test_parsing_a_long_turn_does_not_block_the_event_loop(chat):
    long_turn = "word " * 1000  # 5,000 characters
    settings = RolloutSettings(n=1, max_tokens_per_turn=5000, max_total_tokens=6000)
    engine = RolloutEngine(
        ScriptedBackend([[long_turn]], chat), chat, SlowParser(), [], None, settings
    )

    async def main():
        import time

        gaps, stop = [], asyncio.Event()

        async def ticker():
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticking = asyncio.create_task(ticker())
        [trajectory] = await engine.run([{"question": "q"}])
        stop.set()
        await ticking
        return trajectory, max(gaps)

    trajectory, worst_gap = asyncio.run(main())
    assert trajectory.finish_reason == "answer"
    assert worst_gap < 0.75, f"the event loop stalled for {worst_gap:.2f}s while parsing"


def test_chains_in_flight_never_outnumber_the_env_pool(chat, caplog):
    """A chain holds its env to its end: with more chains in flight than envs, the extra ones
    would wait past acquire_timeout and fail. The engine runs at most pool_max chains."""
    from agentfly_cli.envs.base import BaseEnv, EnvSpec
    from agentfly_cli.envs.manager import ResourceManager
    from agentfly_cli.settings.envs import EnvPoolSettings

    holding = {"now": 0, "peak": 0}

    class Bench(BaseEnv):
        pass

    @tool(env="bench")
    async def hold(env) -> str:
        """Use the env for a while."""
        holding["now"] += 1
        holding["peak"] = max(holding["peak"], holding["now"])
        await asyncio.sleep(0.3)
        holding["now"] -= 1
        return "held"

    spec = EnvSpec(name="bench", factory=Bench, pool_max=2, warm_size=0)
    envs = ResourceManager({"bench": spec}, {"bench": EnvPoolSettings(acquire_timeout=0.2)})
    script = [[call("hold"), call("answer", answer="1")] for _ in range(6)]
    engine = RolloutEngine(
        ScriptedBackend(script, chat),
        chat,
        get_parser("hermes"),
        [hold, answer],
        None,
        RolloutSettings(n=1, max_turns=3, concurrency=6),
        env_manager=envs,
    )
    assert engine.chain_limit == 2
    assert "envs.bench.pool_max" in caplog.text
    trajectories = run(engine, [{"question": str(i)} for i in range(6)])
    assert [[c.status for c in t.tool_calls] for t in trajectories] == [["ok", "ok"]] * 6
    assert holding["peak"] == 2


def test_a_pool_servers_envs_do_not_lower_the_chain_bound(chat):
    """A pool server's cap is the server's (`agentfly env up --set pool_max=...`), not the
    spec's default: chains in flight stay at rollout.concurrency."""
    from agentfly_cli.envs.base import BaseEnv, EnvSpec
    from agentfly_cli.envs.manager import ResourceManager
    from agentfly_cli.settings.envs import EnvPoolSettings

    @tool(env="served")
    async def poke(env) -> str:
        """Touch the env."""
        return "ok"

    spec = EnvSpec(name="served", factory=BaseEnv, pool_max=2, warm_size=0)
    local = ResourceManager({"served": spec})
    remote = ResourceManager({"served": spec}, {"served": EnvPoolSettings(address="served")})
    limits = [
        RolloutEngine(
            ScriptedBackend([], chat),
            chat,
            get_parser("hermes"),
            [poke],
            None,
            RolloutSettings(concurrency=6),
            env_manager=envs,
        ).chain_limit
        for envs in (local, remote)
    ]
    assert limits == [2, 6]
