"""@reward: injection of the answer, trajectory and dataset fields; results; failures."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentfly_cli import CombinedReward, Reward, RewardResult, reward
from agentfly_cli.components.rewards import RewardDefinitionError
from agentfly_cli.errors import RewardError


def run(coro):
    return asyncio.run(coro)


@reward
def equal(prediction: str, answer: str) -> float:
    """Exact equality."""
    return float(prediction == answer)


@reward
async def async_equal(prediction: str, answer: str) -> float:
    await asyncio.sleep(0)
    return float(prediction == answer)


def test_sync_and_async_rewards():
    assert run(equal("4", answer="4")).reward == 1.0
    assert run(async_equal("4", answer="5")).reward == 0.0
    result = run(equal("4", answer="4"))
    assert isinstance(result, RewardResult)
    assert (result.name, result.failed, result.error) == ("equal", False, None)


def test_bare_and_parametrised_decorators():
    assert isinstance(equal, Reward)
    named = reward(name="strict", timeout=1)(lambda prediction: 1.0)
    assert isinstance(named, Reward) and named.name == "strict" and named.timeout == 1


def test_dataset_fields_are_injected_by_name():
    seen = {}

    @reward
    def scorer(prediction, answer, difficulty="easy", trajectory=None, **kwargs):
        seen.update(
            prediction=prediction,
            answer=answer,
            difficulty=difficulty,
            trajectory=trajectory,
            kwargs=kwargs,
        )
        return 0.5

    trajectory = object()
    fields = {"answer": "42", "difficulty": "hard", "id": 7, "question": "q"}
    result = run(scorer.score("41", trajectory, fields))
    assert result.reward == 0.5
    assert seen == {
        "prediction": "41",
        "answer": "42",
        "difficulty": "hard",
        "trajectory": trajectory,
        "kwargs": {"id": 7, "question": "q"},
    }
    assert scorer.fields == ["answer"]


def test_kwargs_receive_all_fields():
    @reward
    def everything(prediction, **kwargs):
        return {"reward": 1.0, "fields": sorted(kwargs)}

    result = run(everything("x", answer=1, id=2))
    assert result.extras == {"fields": ["answer", "id"]}


def test_prediction_named_anywhere_and_trajectory_only():
    @reward
    def named(answer, prediction):
        return float(answer == prediction)

    @reward
    def by_trajectory(trajectory):
        return float(len(trajectory))

    assert run(named.score("a", None, {"answer": "a"})).reward == 1.0
    assert run(by_trajectory.score("ignored", [1, 2, 3])).reward == 3.0


def test_missing_field_is_a_failure_naming_the_field():
    result = run(equal("4", question="q"))
    assert result.failed and result.reward == 0.0
    assert result.error == "reward 'equal' needs dataset field(s) 'answer'; the row has: question"


def test_dict_return_with_extras():
    @reward
    def detailed(prediction):
        return {"reward": 0.25, "precision": 0.5, "recall": 1}

    result = run(detailed("x"))
    assert result.reward == 0.25
    assert result.extras == {"precision": 0.5, "recall": 1}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"score": 1}, "without a 'reward' key"),
        ("1.0", "must return a number"),
        (None, "must return a number"),
        (float("nan"), "non-finite"),
        (float("inf"), "non-finite"),
    ],
)
def test_bad_return_values_fail(value, message):
    bad = reward(name="bad")(lambda prediction: value)
    result = run(bad("x"))
    assert result.failed and result.reward == 0.0
    assert message in result.error and "reward 'bad' failed" in result.error


def test_bool_and_int_returns_are_numbers():
    assert run(reward(name="yes")(lambda prediction: True)("x")).reward == 1.0
    assert run(reward(name="three")(lambda prediction: 3)("x")).reward == 3.0


def test_exception_is_recorded_and_scores_zero():
    @reward
    def broken(prediction):
        raise KeyError("lookup")

    result = run(broken("x"))
    assert result.failed and result.reward == 0.0
    assert result.error == "reward 'broken' failed: KeyError: 'lookup'"


def test_on_error_raise_aborts():
    @reward(on_error="raise")
    def broken(prediction):
        raise ValueError("bad gold")

    with pytest.raises(RewardError, match="reward 'broken' failed: ValueError: bad gold"):
        run(broken("x"))


def test_timeout_sync_and_async():
    release = threading.Event()

    @reward(timeout=0.1)
    def slow_sync(prediction):
        release.wait(5)
        return 1.0

    @reward(timeout=0.1)
    async def slow_async(prediction):
        await asyncio.sleep(5)
        return 1.0

    async def both():
        return await asyncio.gather(slow_sync("x"), slow_async("x"))

    started = time.perf_counter()
    results = run(both())
    release.set()
    assert time.perf_counter() - started < 2
    for result in results:
        assert result.failed and "timed out after 0.1 s" in result.error


def test_timeout_with_raise_policy():
    @reward(timeout=0.05, on_error="raise")
    async def slow(prediction):
        await asyncio.sleep(5)

    with pytest.raises(RewardError, match="timed out"):
        run(slow("x"))


def test_combined_rewards_weighted_and_concurrent():
    @reward
    async def half(prediction):
        await asyncio.sleep(0.2)
        return 0.5

    @reward
    async def f1(prediction):
        await asyncio.sleep(0.2)
        return {"reward": 1.0, "precision": 1.0}

    combined = CombinedReward([(half, 2.0), (f1, 0.5)])
    started = time.perf_counter()
    result = run(combined("x"))
    assert time.perf_counter() - started < 0.35  # both ran at once
    assert result.reward == pytest.approx(2.0 * 0.5 + 0.5 * 1.0)
    assert result.extras == {"half": 0.5, "f1": 1.0, "f1/precision": 1.0}
    assert combined.name == "2*half + 0.5*f1"
    assert not result.failed


def test_combined_reward_records_component_failures():
    @reward
    def broken(prediction):
        raise RuntimeError("down")

    result = run(CombinedReward([(equal, 1.0), (broken, 1.0)]).score("4", None, {"answer": "4"}))
    assert result.reward == 1.0 and result.failed
    assert "reward 'broken' failed: RuntimeError: down" in result.error


def test_combined_reward_errors():
    with pytest.raises(RewardDefinitionError, match="at least one"):
        CombinedReward([])
    with pytest.raises(RewardDefinitionError, match="listed twice: equal"):
        CombinedReward([(equal, 1.0), (equal, 2.0)])


def test_definition_errors():
    with pytest.raises(RewardDefinitionError, match="on_error"):
        reward(on_error="ignore")(lambda prediction: 1.0)
    with pytest.raises(RewardDefinitionError, match="needs a function"):
        Reward(3)
    with pytest.raises(RewardDefinitionError, match="'<lambda>' is not valid; pass name="):
        reward(lambda prediction: 1.0)
    for timeout in (0, -1):
        with pytest.raises(RewardDefinitionError, match="timeout must be > 0"):
            reward(timeout=timeout)(equal.func)


def test_returned_reward_result_is_checked_and_copied():
    shared = RewardResult(0.5, {"k": 1})

    @reward
    def reuse(prediction):
        return shared

    result = run(reuse("x"))
    assert result.reward == 0.5 and result.name == "reuse" and result is not shared
    assert shared.name is None
    nan = reward(name="nan")(lambda prediction: RewardResult(float("nan")))
    assert "non-finite" in run(nan("x")).error
