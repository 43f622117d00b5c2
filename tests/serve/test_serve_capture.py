"""The gateway's capture: an agent's requests become token-exact segments.

A fake backend answers with scripted text as if sampled. Each test checks what the backend was
sent (the prompt ids) against what the segment records, and the trajectory invariant
(``ids[loss_mask]`` is every sampled id, nothing else) on real templates.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.backends.base import Backend, Generation
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.gateway import Gateway, RequestError
from tests.chat.test_chat_templates import TOOLS  # the calculator's schema


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class Replies(Backend):
    """Answers each request with the next scripted text, encoded as if sampled; keeps the
    prompts it was sent."""

    name = "replies"

    def __init__(self, chat: ChatTemplate, texts: list[str]) -> None:
        self.chat, self.texts, self.prompts = chat, list(texts), []

    async def generate(self, prompt_ids, params, context=None):
        self.prompts.append(list(prompt_ids))
        ids = self.chat.encode_response(self.texts.pop(0))
        await asyncio.sleep(0)
        return Generation(ids, [-0.5] * len(ids), "stop")


def gateway_for(chat: ChatTemplate, texts: list[str]) -> Gateway:
    return Gateway(Replies(chat, texts), chat, get_parser("hermes"), "test-model")


def echoed(message: dict) -> dict:
    """The assistant message as an SDK sends it back: new call ids, arguments re-serialised."""
    out = {"role": "assistant", "content": message["content"]}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": f"other-{i}",
                "type": "function",
                "function": {
                    "name": c["function"]["name"],
                    "arguments": json.dumps(json.loads(c["function"]["arguments"]), indent=1),
                },
            }
            for i, c in enumerate(message["tool_calls"])
        ]
    return out


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


def agent_episode(gateway: Gateway, session: str = "ep-1"):
    """A two-step tool-using agent: ask, call the calculator, read the result, answer."""
    messages = [
        {"role": "system", "content": "You can use a calculator."},
        {"role": "user", "content": "What is 17 * 23?"},
    ]
    first = run(gateway.complete(session, {"messages": messages, "tools": TOOLS}))
    reply = echoed(first["choices"][0]["message"])
    [tool_call] = reply["tool_calls"]
    messages += [reply, {"role": "tool", "tool_call_id": tool_call["id"], "content": "391"}]
    second = run(gateway.complete(session, {"messages": messages, "tools": TOOLS}))
    return first, second, messages


def test_a_tool_using_agent_grows_one_token_exact_segment(tiny_chat):
    gateway = gateway_for(tiny_chat, [call("calculator", expression="17 * 23"), "It is 391."])
    first, second, _ = agent_episode(gateway)
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    call_out = first["choices"][0]["message"]["tool_calls"][0]["function"]
    assert (call_out["name"], json.loads(call_out["arguments"])) == (
        "calculator", {"expression": "17 * 23"},
    )  # fmt: skip
    assert second["choices"][0]["message"] == {"role": "assistant", "content": "It is 391."}
    episode = gateway.episodes["ep-1"]
    [segment] = episode.segments
    trajectory = segment.trajectory
    trajectory.check()
    sent_first, sent_second = gateway.backend.prompts
    replied = tiny_chat.encode_response(call("calculator", expression="17 * 23"))
    # the second prompt is the first prompt, the exact sampled ids, then the tool turn's delta
    assert sent_second[: len(sent_first) + len(replied)] == sent_first + replied
    assert trajectory.ids[: len(sent_second)] == sent_second
    assert [t.role for t in trajectory.turns] == ["prompt", "assistant", "observation", "assistant"]
    assert sum(trajectory.loss_mask) == len(replied) + len(tiny_chat.encode_response("It is 391."))
    assert "391" in tiny_chat.decode(trajectory.ids[trajectory.turns[2].start :])


def test_a_rewritten_history_starts_a_new_segment(tiny_chat):
    gateway = gateway_for(
        tiny_chat, [call("calculator", expression="17 * 23"), "It is 391.", "391."]
    )
    _, _, messages = agent_episode(gateway)
    trimmed = [messages[0], messages[1], {"role": "user", "content": "Just the number, please."}]
    run(gateway.complete("ep-1", {"messages": trimmed, "tools": TOOLS}))
    segments = gateway.episodes["ep-1"].segments
    assert len(segments) == 2
    for segment in segments:
        segment.trajectory.check()
    # the new segment is the template's own rendering of the trimmed conversation
    assert gateway.backend.prompts[-1] == tiny_chat.render_prompt(trimmed, TOOLS)
    assert segments[1].trajectory.turns[0].role == "prompt"


def test_an_edited_tool_call_is_not_taken_as_the_models_own(tiny_chat):
    gateway = gateway_for(tiny_chat, [call("calculator", expression="17 * 23"), "ok"])
    messages = [{"role": "user", "content": "What is 17 * 23?"}]
    first = run(gateway.complete("s", {"messages": messages, "tools": TOOLS}))
    edited = echoed(first["choices"][0]["message"])
    edited["tool_calls"][0]["function"]["arguments"] = json.dumps({"expression": "17*24"})
    messages += [edited, {"role": "tool", "tool_call_id": "x", "content": "408"}]
    run(gateway.complete("s", {"messages": messages, "tools": TOOLS}))
    assert len(gateway.episodes["s"].segments) == 2  # the agent changed the call: re-rendered


def test_two_requests_extending_one_segment_fork_it(tiny_chat):
    gateway = gateway_for(tiny_chat, [call("calculator", expression="2 + 2"), "four", "4"])
    messages = [{"role": "user", "content": "2 + 2?"}]
    first = run(gateway.complete("s", {"messages": messages, "tools": TOOLS}))
    messages += [echoed(first["choices"][0]["message"]), {"role": "tool", "content": "4"}]

    async def both():
        body = {"messages": messages, "tools": TOOLS}
        return await asyncio.gather(gateway.complete("s", body), gateway.complete("s", body))

    run(both())
    segments = gateway.episodes["s"].segments
    assert len(segments) == 2
    a, b = (s.trajectory for s in segments)
    a.check()
    b.check()
    shared = len(gateway.backend.prompts[1])
    assert a.ids[:shared] == b.ids[:shared] == gateway.backend.prompts[1]
    assert a.ids[shared:] != b.ids[shared:]  # "four" and "4"


def test_n_choices_are_separate_segments_of_one_group(tiny_chat):
    gateway = gateway_for(tiny_chat, ["a", "b", "c"])
    reply = run(gateway.complete("s", {"messages": [{"role": "user", "content": "hi"}], "n": 3}))
    assert [c["message"]["content"] for c in reply["choices"]] == ["a", "b", "c"]
    episode = gateway.close_episode("s", reward=0.5)
    trajectories = episode.trajectories()
    assert len(trajectories) == 3 and {t.group_id for t in trajectories} == {"s"}
    assert all(t.reward == 0.5 for t in trajectories)
    assert "s" not in gateway.episodes


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "no role"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 99}, "n"),
        (
            {"messages": [{"role": "user", "content": "x"}], "temperature": float("nan")},
            "temperature",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": [1]}, "stop"),
        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "always"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages"),
        ({"messages": [{"role": "assistant", "content": "", "tool_calls": "x"}]}, "messages"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"function": 1}]}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": ["calculator"]}, "tools"),
        (
            {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
            "tools",
        ),
    ],
)
def test_bad_requests_name_the_parameter(tiny_chat, body, param):
    gateway = gateway_for(tiny_chat, [])
    with pytest.raises(RequestError) as info:
        run(gateway.complete("s", body))
    assert info.value.param == param and "\n" not in str(info.value)


def test_real_templates_keep_the_invariant_over_an_agent_episode(realdata):
    from tests.rollout.test_rollout_realdata import load

    for case in ("qwen2.5", "qwen3-thinking", "smollm2-hermes"):
        chat = load(realdata, case)
        think = "<think>\nUse the tool.\n</think>\n\n" if case == "qwen3-thinking" else ""
        texts = [think + call("calculator", expression="17 * 23"), think + "It is 391."]
        gateway = gateway_for(chat, texts)
        first, second, _ = agent_episode(gateway)
        [segment] = gateway.episodes["ep-1"].segments  # the template drops nothing we keep
        segment.trajectory.check()
        sent_first, sent_second = gateway.backend.prompts
        assert sent_second[: len(sent_first)] == sent_first, case
        if think:  # the model's thinking stays in its context, as sampled
            assert "Use the tool." in chat.decode(sent_second[len(sent_first) :])
            assert second["choices"][0]["message"]["reasoning_content"].strip() == "Use the tool."


def test_stop_strings_are_cut_from_the_text_but_kept_in_the_tokens(tiny_chat):
    gateway = gateway_for(tiny_chat, ["CALC: 2+2\nrest", "ANSWER: 4"])
    messages = [{"role": "user", "content": "2 + 2?"}]
    first = run(gateway.complete("s", {"messages": messages, "stop": ["\n"]}))
    assert first["choices"][0]["message"]["content"] == "CALC: 2+2"
    messages += [first["choices"][0]["message"], {"role": "user", "content": "RESULT: 4"}]
    run(gateway.complete("s", {"messages": messages, "stop": "\n"}))
    [segment] = gateway.episodes["s"].segments  # the cut reply, echoed, still extends it
    segment.trajectory.check()
    assert "rest" in tiny_chat.decode(segment.trajectory.turns[1].sampled_ids)


def test_adversarial_content_is_recorded_not_a_crash(tiny_chat):
    """A lone surrogate, a 200 kB message and NaN where a number goes."""
    gateway = gateway_for(tiny_chat, ["ok", "ok"])
    odd = {"role": "user", "content": "half a pair \ud800 and " + "x" * 200_000}
    reply = run(gateway.complete("s", {"messages": [odd]}))
    assert reply["choices"][0]["message"]["content"] == "ok"
    gateway.episodes["s"].segments[0].trajectory.check()
    with pytest.raises(RequestError, match="temperature"):
        run(gateway.complete("s", {"messages": [odd], "temperature": float("nan")}))


def test_segments_record_the_tool_calls_the_gateway_parsed(tiny_chat):
    """A reward with --agent reads the calls the gateway parsed, with what the agent sent back
    (by call id, or in order when the agent changed the ids, as `echoed` does)."""
    gateway = gateway_for(tiny_chat, [
        call("calculator", expression="17 * 23") + "\n" + call("calculator", expression="1 + 1"),
        "It is 391.",
        "Sure.",
    ])  # fmt: skip
    messages = [{"role": "user", "content": "What is 17 * 23?"}]
    first = run(gateway.complete("s", {"messages": messages, "tools": TOOLS}))
    reply = first["choices"][0]["message"]
    ids = [c["id"] for c in reply["tool_calls"]]
    results = [{"role": "tool", "tool_call_id": ids[1], "content": "2"},  # out of order, by id
               {"role": "tool", "tool_call_id": ids[0], "content": "391"}]  # fmt: skip
    messages += [reply, *results]
    run(gateway.complete("s", {"messages": messages, "tools": TOOLS}))
    [segment] = gateway.episodes["s"].segments
    calls = segment.trajectory.tool_calls
    assert [(c.turn, c.name, c.arguments, c.observation, c.status) for c in calls] == [
        (0, "calculator", {"expression": "17 * 23"}, "391", "ok"),
        (0, "calculator", {"expression": "1 + 1"}, "2", "ok"),
    ]
    assert [c.id for c in calls] == ids
    # an agent that sends new ids (or none): its results answer the calls in order
    gateway = gateway_for(tiny_chat, [call("calculator", expression="2 + 2"), "four", "4"])
    messages = [{"role": "user", "content": "2 + 2?"}]
    first = run(gateway.complete("t", {"messages": messages, "tools": TOOLS}))
    messages += [echoed(first["choices"][0]["message"]), {"role": "tool", "content": "4"}]
    body = {"messages": messages, "tools": TOOLS}

    async def both():  # two requests from one point: the second forks the segment
        return await asyncio.gather(gateway.complete("t", body), gateway.complete("t", body))

    run(both())
    for segment in gateway.episodes["t"].segments:
        assert [(c.name, c.observation) for c in segment.trajectory.tool_calls] == [
            ("calculator", "4")
        ]
