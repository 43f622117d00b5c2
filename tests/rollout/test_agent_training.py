"""``--agent file.py:fn``: agent programs written with the OpenAI SDK, rolled out, evaluated
and trained through the gateway on the tiny model, and the one-line refusals."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.cli.app import build_app
from agentfly_cli.trajectory import read_trajectories
from tests.train.test_trainer import ON_CPU, recipe  # noqa: F401 (fixture)

pytest.importorskip("openai", reason="the openai SDK is a dev dependency")

AGENTS = '''
import httpx
from openai import AsyncOpenAI, OpenAI


def chatty(task, base_url):
    """Two turns with the SDK; its reward: the share of digits in what the model wrote."""
    client = OpenAI(base_url=base_url, api_key="none")
    messages = [{"role": "user", "content": task["question"]}]
    said = ""
    for _ in range(2):
        reply = client.chat.completions.create(model="m", messages=messages, max_tokens=6)
        text = reply.choices[0].message.content or ""
        said += text
        messages += [{"role": "assistant", "content": text},
                     {"role": "user", "content": "Go on."}]
    return sum(c.isdigit() for c in said) / max(len(said), 1)


def answers(task, base_url):
    """One turn; its text is the answer the run's reward scores."""
    client = OpenAI(base_url=base_url, api_key="none")
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task["question"]}], max_tokens=4
    )
    return reply.choices[0].message.content


def flaky(task, base_url):
    """Fails after its first request on every other task."""
    answers(task, base_url)
    if int(task["question"].split()[2]) % 2:
        raise RuntimeError("the agent's own tool crashed")
    return 1.0


async def in_async(task, base_url):
    client = AsyncOpenAI(base_url=base_url, api_key="none", http_client=httpx.AsyncClient())
    reply = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": task["question"]}], max_tokens=4
    )
    await client.close()
    return len(reply.choices[0].message.content or "") / 10


def half_give_up(task, base_url):
    """Every other task: no request at all; else the chatty agent."""
    if int(task["question"].split()[2]) % 2:
        raise RuntimeError("gave up")
    return chatty(task, base_url)


def sleeps(task, base_url):
    import time

    time.sleep(2)


def gives_up(task, base_url):
    raise TimeoutError("no model call at all")


def two_args_please(task):
    return 0.0


NOT_A_FUNCTION = 3
'''


@pytest.fixture
def agents(tmp_path):
    path = tmp_path / "agents.py"
    path.write_text(AGENTS)
    return path


def cli(recipe, agent: str, command: str, *extra: str):  # noqa: F811
    fields = recipe["fields"]
    args = [command, "calculator", "--model", fields["model"], "--agent", agent,
            "--data", fields["data.path"], "--reward", fields["reward"]]  # fmt: skip
    for item in [*recipe["sets"], *ON_CPU]:
        args += ["--set", item]
    return CliRunner().invoke(build_app(), [*args, *extra])


def test_an_sdk_agent_trains_through_the_gateway(recipe, agents, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    result = cli(recipe, f"{agents}:chatty", "train", "--out", str(run_dir), "--quiet",
                 "--steps", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert lines[0]["grad_norm"] > 0  # the agents' rewards differ: there is a signal
    for step in (1, 2):
        trajectories = read_trajectories(run_dir / "trajectories" / f"step-00000{step}.jsonl")
        assert len(trajectories) == 2 * 3  # 2 tasks x 3 episodes, one segment each
        for trajectory in trajectories:
            trajectory.check()
            assert trajectory.num_turns == 2 and trajectory.meta["agent"].endswith(":chatty")
            assert {t.policy_version for t in trajectory.turns if t.sampled_ids} == {step - 1}
            trained = [
                lp for lp, m in zip(trajectory.logprobs, trajectory.loss_mask, strict=True) if m
            ]
            assert trained and None not in trained  # the sampler's logprobs, for the loss
        groups = {t.group_id for t in trajectories}
        assert len(groups) == 2 and all(g.startswith(f"s{step}:") for g in groups)  # by task
    config = json.loads((run_dir / "config.json").read_text())
    assert config["agent"]["entry"].endswith("agents.py:chatty")


def test_rollout_and_eval_run_agents_and_score_their_answers(recipe, agents, tmp_path):  # noqa: F811
    out = tmp_path / "roll.jsonl"
    result = cli(recipe, f"{agents}:answers", "rollout", "--out", str(out), "--limit", "2")
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    assert len(trajectories) == 2 * 3
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.reward is not None and trajectory.prediction is not None
    evaluated = cli(recipe, f"{agents}:in_async", "eval", "--limit", "2", "--quiet", "--json",
                    "--out", str(tmp_path / "eval.jsonl"))  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    assert all(t.num_turns == 1 for t in read_trajectories(tmp_path / "eval.jsonl"))


def test_an_agent_that_raises_is_data_not_a_crash(recipe, agents, tmp_path):  # noqa: F811
    out = tmp_path / "roll.jsonl"
    result = cli(recipe, f"{agents}:flaky", "rollout", "--out", str(out), "--limit", "2")
    assert result.exit_code == 0, result.output
    trajectories = read_trajectories(out)
    failed = [t for t in trajectories if t.error]
    assert len(failed) == 3 and len(trajectories) == 6  # task "1 + 2" fails, "0 + 1" does not
    assert all("the agent's own tool crashed" in t.error and t.reward == 0.0 for t in failed)
    assert all(t.finish_reason == "abort" for t in failed)
    assert all(t.reward == 1.0 for t in trajectories if not t.error)


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("{dir}/nope.py:agent", "no file"),
        ("{agents}:missing", "has no attribute 'missing'"),
        ("{agents}:NOT_A_FUNCTION", "is not a function"),
        ("{agents}:two_args_please", "must take (task, base_url)"),
    ],
)
def test_bad_agents_are_one_line_errors(recipe, agents, tmp_path, agent, message):  # noqa: F811
    spec = agent.format(dir=tmp_path, agents=agents)
    result = cli(recipe, spec, "rollout", "--limit", "1")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_an_agent_trains_asynchronously_within_the_staleness_bound(recipe, agents, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    result = cli(recipe, f"{agents}:chatty", "train", "--out", str(run_dir), "--quiet",
                 "--steps", "3", "--set", "trainer.mode=async",
                 "--set", "trainer.max_staleness=1")  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert all(line["async/staleness_max"] <= 1 for line in lines)
    for step in (1, 2, 3):
        trajectories = read_trajectories(run_dir / "trajectories" / f"step-00000{step}.jsonl")
        assert len(trajectories) == 2 * 3  # whole groups: 3 episodes of each of 2 tasks
        versions = {t.policy_version for tr in trajectories for t in tr.turns if t.sampled_ids}
        assert versions <= {step - 2, step - 1}, (step, versions)


def test_training_with_the_agents_own_sampling_is_refused_with_one_line(recipe, agents):  # noqa: F811
    sampled = cli(recipe, f"{agents}:chatty", "train", "--steps", "1", "--quiet",
                  "--set", "agent.sampling=agent")  # fmt: skip
    assert sampled.exit_code == 2 and "agent.sampling: rollout" in sampled.output


def test_an_episode_without_a_request_counts_as_a_failed_chain(recipe, agents, tmp_path):  # noqa: F811
    out = tmp_path / "roll.jsonl"
    result = cli(recipe, f"{agents}:gives_up", "rollout", "--limit", "2", "--out", str(out))
    assert result.exit_code == 2  # every chain aborted: the rollout has no data, one line
    assert "all 6 chains of the rollout" in result.output and "Traceback" not in result.output
    assert "agentfly serve" in " ".join(result.output.split())  # the fix for a raising agent
    trajectories = read_trajectories(out)  # written as they finished, nothing lost
    assert len(trajectories) == 6
    for trajectory in trajectories:
        assert trajectory.ids == [] and trajectory.reward == 0.0
        assert trajectory.finish_reason == "abort" and "no model call" in trajectory.error
    # the agent's own TimeoutError above is its error; the episode's deadline is another one
    late = cli(recipe, f"{agents}:sleeps", "rollout", "--limit", "1", "--out", str(out),
               "--set", "agent.timeout_s=0.3")  # fmt: skip
    assert late.exit_code == 2
    assert all("AgentTimeout" in t.error and "agent.timeout_s" in t.error
               for t in read_trajectories(out))  # fmt: skip


def test_training_steps_over_episodes_that_made_no_request(recipe, agents, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    result = cli(recipe, f"{agents}:half_give_up", "train", "--out", str(run_dir), "--quiet",
                 "--steps", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    [line] = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert line["train/dropped_unusable"] == 3.0 and line["train/trajectories"] == 3.0
    assert line["grad_norm"] > 0


def test_remax_rolls_one_greedy_episode_per_task_through_the_gateway(recipe, agents, tmp_path):  # noqa: F811
    run_dir = tmp_path / "run"
    result = cli(recipe, f"{agents}:chatty", "train", "--out", str(run_dir), "--quiet",
                 "--steps", "1", "--set", "trainer.algorithm.advantage=remax")  # fmt: skip
    assert result.exit_code == 0, result.output
    [line] = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trajectories = read_trajectories(run_dir / "trajectories" / "step-000001.jsonl")
    greedy = [t for t in trajectories if t.meta.get("greedy")]
    assert len(trajectories) == 2 * 4 and len(greedy) == 2  # 3 sampled + 1 greedy per task
    assert {t.sample_index for t in greedy} == {3}
    assert {t.group_id for t in greedy} == {t.group_id for t in trajectories}
    assert line["train/trajectories"] == 6.0  # the greedy episodes are the baseline only
    assert line["reward/greedy_mean"] == pytest.approx(sum(t.reward for t in greedy) / 2)
    assert line["adv/missing_baseline"] == 0.0
