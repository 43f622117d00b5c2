"""examples/compaction_agent: an OpenAI-SDK agent that summarises its history and goes on
from the summary. Through the agent engine (scripted replies on the tiny model), each episode
is two segments that share its reward and group; the summary is trained where it was sampled
and is the next segment's prompt; GiGPO credits the turns over both segments."""

from __future__ import annotations

import asyncio
import math

import pytest

from agentfly_cli.algorithms.interfaces import get_advantage_estimator
from agentfly_cli.backends.base import Backend, Generation
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.plugin_host.loading import resolve_reward
from agentfly_cli.plugin_host.plugins import get_plugin_host
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.rollout.agent_engine import AgentEngine, load_agent
from agentfly_cli.train.tensors.step_batch import StepBatch, trainable
from agentfly_cli.train.update import fill_advantages
from tests.helpers.paths import REPO_ROOT

pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
pytest.importorskip("starlette", reason="the gateway needs the serve extra")

EXAMPLE = REPO_ROOT / "examples" / "compaction_agent"
TASK = {"id": "chain-000", "answer": "504",
        "question": "Start at 17. Then multiply by 4, then add 16, then multiply by 6. "
                    "What is the result?"}  # fmt: skip
SHARED = ["CALC: 17*4", "CALC: 68+16"]  # both episodes' first context, before the summary
WINS = [*SHARED, "SUMMARY: 84, then multiply by 6", "CALC: 84*6", "ANSWER: 504"]
LOSES = [*SHARED, "SUMMARY: 84, nothing left", "ANSWER: 84"]
ROOT2 = math.sqrt(0.5)  # a member of a two-sample group, rewards [1, 0]


class BySession(Backend):
    """The first session to ask replays WINS, the second LOSES (keyed by the session,
    which is the request's group id)."""

    name = "by-session"

    def __init__(self, chat: ChatTemplate) -> None:
        self.chat, self.scripts = chat, {}

    async def generate(self, prompt_ids, params, context=None):
        script = self.scripts.setdefault(
            context.group_id, list(WINS if not self.scripts else LOSES)
        )
        ids = self.chat.encode_response(script.pop(0))
        await asyncio.sleep(0)
        return Generation(ids, [-0.5] * len(ids), "stop")


@pytest.fixture
def episodes(tiny_model):
    config = load_config(str(EXAMPLE / "recipe.yaml"))
    chat = ChatTemplate.load(str(tiny_model), observation=config.chat.observation)
    reward = resolve_reward("exact_match", get_plugin_host())
    agent = load_agent(f"{EXAMPLE}/agent.py:agent")
    engine = AgentEngine(
        BySession(chat), chat, get_parser(config.chat.parser), agent, reward,
        config.rollout.model_copy(update={"n": 2}), config.agent,
        env_manager=ResourceManager({}),
    )  # fmt: skip
    trajectories = asyncio.run(engine.run([TASK]))
    return config, chat, trajectories


def test_each_episode_is_two_segments_sharing_its_reward_and_group(episodes):
    _, chat, trajectories = episodes
    assert len(trajectories) == 4  # 2 episodes x 2 segments
    by_episode = {}
    for t in trajectories:
        t.check()
        assert t.error is None
        by_episode.setdefault(t.meta["episode"], []).append(t)
    assert {t.group_id for t in trajectories} == {"b0:0"}
    for segments in by_episode.values():
        assert [(t.meta["segment"], t.meta["segments"]) for t in segments] == [(0, 2), (1, 2)]
        assert len({t.reward for t in segments}) == 1
    assert sorted(segments[0].reward for segments in by_episode.values()) == [0.0, 1.0]
    for first, second in by_episode.values():
        # the summary: sampled (mask 1) as the first segment's last turn ...
        summary = [turn for turn in first.turns if turn.role == "assistant"][-1]
        assert chat.decode(summary.sampled_ids).startswith("SUMMARY: 84")
        assert set(first.loss_mask[summary.start : summary.end]) == {1}
        # ... and, in the next segment, part of the prompt it continues from (mask 0)
        prompt = second.turns[0]
        assert prompt.role == "prompt" and set(second.loss_mask[: prompt.end]) == {0}
        said = chat.decode(summary.sampled_ids).removeprefix("SUMMARY:").strip()
        assert f"Your notes so far: {said}" in chat.decode(second.ids[: prompt.end])
        # episode time runs on across the segments
        times = [turn.episode_turn for t in (first, second) for turn in t.turns if turn.sampled_ids]
        assert times == list(range(len(times)))


def test_gigpo_credits_the_summary_and_the_turns_over_the_segments(episodes):
    config, _, trajectories = episodes
    algo = config.trainer.algorithm
    assert (algo.advantage, algo.turn_state, algo.branch_credit) == ("gigpo", "auto", "episode")
    metrics: dict = {}
    batch = StepBatch.of(trainable(trajectories, algo, metrics), algo)
    fill_advantages(batch, metrics, get_advantage_estimator("gigpo"), algo, reference=False)
    assert metrics["adv/turns"] == 5 + 4 and metrics["train/branch_ends"] == 2.0
    per_turn = {}  # (won, turn number in the episode) -> the advantage on its tokens
    for row, (t, spans) in enumerate(zip(trajectories, batch.turns, strict=True)):
        for span in spans:
            values = set(batch.advantages[row, span.start : span.end].tolist())
            assert len(values) == 1  # one advantage per turn
            per_turn[(t.reward == 1.0, span.step)] = values.pop()
    # episode advantage +-ROOT2; the first three turns (the summary the third) answered the
    # same prefixes in both episodes, so each gets another +-ROOT2 of step credit: the
    # summary that kept "multiply by 6" is credited over the one that dropped it
    expected = {(True, 0): 2 * ROOT2, (True, 1): 2 * ROOT2, (True, 2): 2 * ROOT2,
                (True, 3): ROOT2, (True, 4): ROOT2,
                (False, 0): -2 * ROOT2, (False, 1): -2 * ROOT2, (False, 2): -2 * ROOT2,
                (False, 3): -ROOT2}  # fmt: skip
    assert per_turn == pytest.approx(expected, abs=1e-5)


def test_branch_credit_none_trains_no_summary(episodes):
    config, chat, trajectories = episodes
    algo = config.trainer.algorithm.model_copy(update={"branch_credit": "none"})
    usable = trainable(trajectories, algo, {})
    for t in usable:
        trained = [i for i, m in zip(t.ids, t.loss_mask, strict=True) if m]
        assert "SUMMARY" not in chat.decode(trained)
    assert sum(t.reward == 1.0 and t.meta["segment"] == 0 for t in usable) == 1  # still there
    assert [t.loss_mask for t in trajectories] != [t.loss_mask for t in usable]
    assert all(1 in t.loss_mask for t in trajectories)  # the records stay as sampled
