"""GiGPO over an agent episode's segments (a compaction, a fork, a sub-agent), checked
against an independent float64 transcription of the method: turns in episode time, turn_gamma
over the turns left in the episode, anchor states by hand, and the branch-credit option."""

from __future__ import annotations

import statistics

import pytest

from agentfly_cli.algorithms.interfaces import get_advantage_estimator
from agentfly_cli.algorithms.turn_credit import turn_spans
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.train.tensors.branches import branch_ends
from agentfly_cli.train.tensors.step_batch import StepBatch, trainable
from agentfly_cli.train.update import fill_advantages
from agentfly_cli.trajectory import Trajectory

P, Q, R = [1, 2, 3], [1, 2, 4, 4], [1, 5]  # the task's prompt, a summary's, a sub-agent's
O1, O2, O3, O4 = [50], [51], [52], [53]
A = [10, 11]  # the first action, the same in every episode: later prefixes can repeat
EPS = 1e-6


def asst(ids, time, observation_state, prefix_state):
    """An assistant turn, its place in the episode's time, and (written by hand) the state it
    answered under turn_state observation and prefix."""
    return ("assistant", ids, time, observation_state, prefix_state)


# Each row: a segment (or an env chain: episode None). Prefix states are named by the tokens
# before the turn; "P.A.O1" is the prompt, action A and observation O1.
ROWS = [
    # E1 (won): a compaction. Segment 0 ends with the summary [12]; segment 1 starts from Q.
    {"episode": "E1", "group": "g", "reward": 1.0, "spans": [
        ("prompt", P), asst(A, 0, "P", "P"), ("observation", O1), asst([12], 1, "O1", "P.A.O1"),
    ]},
    {"episode": "E1", "group": "g", "reward": 1.0, "spans": [
        ("prompt", Q), asst([13], 2, "Q", "Q"), ("observation", O2),
        asst([14, 15], 3, "O2", "Q.13.O2"),
    ]},
    # E2 (lost): two requests extended [P, A] at once; the second ([18]) forked the segment,
    # so the fork's copy of A (time 0) is the same turn as the original's.
    {"episode": "E2", "group": "g", "reward": 0.0, "spans": [
        ("prompt", P), asst(A, 0, "P", "P"), ("observation", O1), asst([16], 1, "O1", "P.A.O1"),
        ("observation", O3), asst([17], 3, "O3", "P.A.O1.16.O3"),
    ]},
    {"episode": "E2", "group": "g", "reward": 0.0, "spans": [
        ("prompt", P), asst(A, 0, "P", "P"), ("observation", O1), asst([18], 2, "O1", "P.A.O1"),
    ]},
    # E3 (won): a sub-agent's segment runs between the main segment's two turns.
    {"episode": "E3", "group": "g", "reward": 1.0, "spans": [
        ("prompt", P), asst(A, 0, "P", "P"), ("observation", O4), asst([19], 3, "O4", "P.A.O4"),
    ]},
    {"episode": "E3", "group": "g", "reward": 1.0, "spans": [
        ("prompt", R), asst([20], 1, "R", "R"), ("observation", O2), asst([21], 2, "O2", "R.20.O2"),
    ]},
    # env chains of another task (the recipe's turn loop): no episode, no times
    {"episode": None, "group": "h", "reward": 0.5, "spans": [
        ("prompt", P), asst(A, None, "P", "P"), ("observation", O1),
        asst([12], None, "O1", "P.A.O1"),
    ]},
    {"episode": None, "group": "h", "reward": 0.0, "spans": [
        ("prompt", P), asst([30], None, "P", "P"), ("observation", O1),
        asst([31], None, "O1", "P.30.O1"),
    ]},
]  # fmt: skip


def trajectories(rows=ROWS) -> list[Trajectory]:
    out = []
    for row in rows:
        meta = {} if row["episode"] is None else {"episode": row["episode"]}
        t = Trajectory(group_id=row["group"], reward=row["reward"], meta=meta)
        for role, ids, *rest in row["spans"]:
            sampled = role == "assistant"
            t.append(role, ids, sampled=sampled, logprobs=[-1.0] * len(ids) if sampled else None,
                     **({"episode_turn": rest[0]} if sampled else {}))  # fmt: skip
        t.check()
        out.append(t)
    return out


def normalised(members: dict) -> dict:
    """{id: (group key, value)} -> {id: GRPO advantage within its group key}, in floats."""
    by_group: dict = {}
    for key, (group, value) in members.items():
        by_group.setdefault(group, []).append((key, value))
    out = {}
    for pairs in by_group.values():
        values = [v for _, v in pairs]
        for key, value in pairs:
            if len(values) < 2:
                out[key] = 0.0
            else:
                mean, std = statistics.mean(values), statistics.stdev(values)
                out[key] = (value - mean) / (std + EPS)
    return out


def reference(rows, turn_state: str, gamma: float, weight: float, masked=frozenset()):
    """Per row, the expected advantage of each trained token (float64, plain Python).
    ``masked``: (row, assistant turn number) pairs that are not trained."""
    episodes: dict = {}  # key -> (group, reward, {time: state})
    for number, row in enumerate(rows):
        key = row["episode"] if row["episode"] is not None else ("row", number)
        kind = turn_state
        if kind == "auto":
            kind = "observation" if row["episode"] is None else "prefix"
        group, reward, turns = episodes.setdefault(key, (row["group"], row["reward"], {}))
        assistants = [s for s in row["spans"] if s[0] == "assistant"]
        for k, (_, _, time, observed, prefix) in enumerate(assistants):
            if (number, k) not in masked:
                turns[time if row["episode"] is not None else k] = (
                    observed if kind == "observation" else prefix
                )
    episode_adv = normalised({key: (g, r) for key, (g, r, _) in episodes.items()})
    returns = {}
    for key, (group, reward, turns) in episodes.items():
        for position, time in enumerate(sorted(turns)):
            returns[(key, time)] = (
                (group, turns[time]),
                gamma ** (len(turns) - 1 - position) * reward,
            )
    step_adv = normalised(returns)
    expected = []
    for number, row in enumerate(rows):
        key = row["episode"] if row["episode"] is not None else ("row", number)
        tokens = []
        assistants = [s for s in row["spans"] if s[0] == "assistant"]
        for k, (_, ids, time, _, _) in enumerate(assistants):
            if (number, k) in masked:
                continue
            time = time if row["episode"] is not None else k
            tokens += [episode_adv[key] + weight * step_adv[(key, time)]] * len(ids)
        expected.append(tokens)
    return expected


def trained_advantages(batch_rows, **settings):
    algo = AlgorithmSettings(advantage="gigpo", **settings)
    metrics: dict = {}
    usable = trainable(trajectories(batch_rows), algo, metrics)
    batch = StepBatch.of(usable, algo)
    fill_advantages(batch, metrics, get_advantage_estimator("gigpo"), algo, reference=False)
    return [
        row[: int(mask.sum())].tolist()
        for row, mask in zip(batch.advantages, batch.mask, strict=True)
    ], metrics


@pytest.mark.parametrize("turn_state", ["auto", "prefix", "observation"])
def test_gigpo_over_segments_matches_the_transcription(turn_state):
    settings = {"turn_gamma": 0.5, "turn_weight": 0.7, "turn_state": turn_state}
    actual, metrics = trained_advantages(ROWS, **settings)
    expected = reference(ROWS, turn_state, 0.5, 0.7)
    for number, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got == pytest.approx(want, abs=1e-5), (turn_state, number)
    assert metrics["adv/turns"] == 4 + 4 + 4 + 2 + 2  # E2's fork copy of A counts once
    assert metrics["train/branch_ends"] == 3.0  # E1's summary, E2's fork, E3's sub-agent


def test_the_discount_counts_the_turns_left_in_the_episode_not_in_the_segment():
    """E1's last turn and E3's sub-agent answer both answered O2 and both end their segment;
    but E3's main segment goes on after it, so it is one turn from its episode's end."""
    actual, _ = trained_advantages(ROWS, turn_gamma=0.5, turn_state="observation")
    won = actual[4][0] - actual[0][0]  # E1 and E3 won alike: their first turns' credit ...
    assert won == pytest.approx(0.0, abs=1e-6)  # ... is equal (both 3 turns from the end)
    e1_last, e3_sub = actual[1][1], actual[5][1]
    assert e1_last - actual[1][0] > 0.5 and e3_sub - actual[5][0] < -0.5  # returns 1 vs 0.5


def test_auto_keys_agent_turns_by_prefix_and_env_turns_by_observation():
    rows = trajectories()
    [agent_second] = [s for s in turn_spans(rows[0], "auto") if s.step == 1]
    [fork_second] = [s for s in turn_spans(rows[3], "auto") if s.step == 2]
    [other] = [s for s in turn_spans(rows[4], "auto") if s.step == 3]
    assert agent_second.state == fork_second.state != other.state  # same prefix P.A.O1
    # both answered O2, after different prefixes: one state by observation, two by prefix
    e1_last, e3_sub = turn_spans(rows[1], "auto")[1], turn_spans(rows[5], "auto")[1]
    assert e1_last.state != e3_sub.state
    observed = [turn_spans(rows[r], "observation")[1].state for r in (1, 5)]
    assert observed[0] == observed[1] == tuple(O2)
    env = turn_spans(rows[6], "auto")
    assert env[1].state == tuple(O1) and env[1].step is None
    assert turn_spans(rows[7], "prefix")[1].state != turn_spans(rows[6], "prefix")[1].state


def test_branch_credit_none_leaves_branch_ends_untrained():
    ends = branch_ends(trajectories())
    # E1's summary (turn 3 of its records), E2's dropped fork, E3's sub-agent answer
    assert ends == [{3}, set(), set(), {3}, set(), {3}, set(), set()]
    actual, metrics = trained_advantages(ROWS, branch_credit="none", turn_gamma=0.5)
    masked = {(0, 1), (3, 1), (5, 1)}
    expected = reference(ROWS, "auto", 0.5, 1.0, masked)
    for got, want in zip(actual, expected, strict=True):
        assert got == pytest.approx(want, abs=1e-5)
    assert [len(row) for row in actual] == [2, 3, 4, 2, 3, 1, 3, 2]
    assert metrics["train/branch_ends"] == 3.0
    default, _ = trained_advantages(ROWS, turn_gamma=0.5)
    assert [len(row) for row in default] == [3, 3, 4, 3, 3, 2, 3, 2]  # episode: all trained
