"""Which chain ends are infrastructure failures (:func:`infra_failure`), and which the model's."""

from __future__ import annotations

import pytest

from agentfly_cli.rollout.infra_failures import INFRA_CAUSES, infra_failure
from agentfly_cli.trajectory import ToolCallRecord, Trajectory


def chain(finish: str = "answer", error: str | None = None, extras=None, calls=()) -> Trajectory:
    t = Trajectory(finish_reason=finish, error=error, reward=0.0)
    t.reward_extras = dict(extras or {})
    t.tool_calls = list(calls)
    return t


def failed_call(kind: str, exception: str | None = None, status: str = "error"):
    info = {} if exception is None else {"exception": exception}
    return ToolCallRecord(0, "c1", "step", {}, "tool 'step' failed", status, kind, info=info)


def could_not_run(error: str):
    """A call the engine could not run (its env did not come): no ``info["exception"]``."""
    text = f"tool 'step' could not run: {error}"
    return ToolCallRecord(0, "c1", "step", {}, text, "error", "exception")


@pytest.mark.parametrize(
    ("trajectory", "cause"),
    [
        (chain("abort", "EnvStartError: env 'sandbox' failed to start: boom"), "env_start"),
        (chain("abort", "AcquireTimeout: no env within 30 s"), "env_start"),
        (chain("abort", "RuntimeError: vLLM engine dead"), "backend"),
        (chain("abort", "the backend aborted the request"), "backend"),
        (chain("abort", None), "backend"),
        (chain("abort", "AgentError: APIConnectionError: Connection error."), "gateway"),
        (chain("abort", "AgentError: InternalServerError: 500"), "gateway"),
        (chain(calls=[failed_call("exception", "EnvProcessDied")]), "env_died"),
        (chain(calls=[failed_call("exception", "ConnectionResetError")]), "env_died"),
        (chain(calls=[failed_call("exception", "LeaseExpired")]), "env_died"),
        (chain(calls=[failed_call("exception", "EnvStartError")]), "env_start"),
        (chain(calls=[could_not_run("EnvStartError: env 'proc' did not reset")]), "env_start"),
        (chain(calls=[could_not_run("AcquireTimeout: no 'proc' env in 30 s")]), "env_start"),
        (chain(extras={"error": "reward 'judge' timed out after 5 s"}), "reward_timeout"),
        (chain(extras={"error": "reward 'judge' failed: KeyError: 'x'"}), "reward_error"),
        (chain("max_turns", extras={"error": "reward 'a' failed: E: m"}), "reward_error"),
    ],
)
def test_infrastructure_causes(trajectory, cause):
    assert cause in INFRA_CAUSES
    assert infra_failure(trajectory) == cause


@pytest.mark.parametrize(
    "trajectory",
    [
        chain("answer"),
        chain("max_turns"),
        chain("length"),
        chain("errors", calls=[failed_call("unknown_tool"), failed_call("invalid_json")]),
        chain(calls=[failed_call("invalid_arguments"), failed_call("timeout")]),
        chain(calls=[failed_call("exception", "ValueError")]),  # the tool refused the input
        chain(calls=[failed_call("exception", "LookupError")]),
        chain("abort", "AgentError: ZeroDivisionError: division by zero"),  # the agent's code
        chain("abort", "AgentTimeout: the agent ran past 60 s"),
        chain("abort", "AgentExit: the agent called sys.exit(1)"),
        # an agent failure's own error in the extras is not a reward failure
        chain("abort", "AgentError: KeyError: 'a'", {"error": "AgentError: KeyError: 'a'"}),
        chain(calls=[failed_call("exception", "EnvProcessDied", status="ok")]),
        chain(calls=[could_not_run("ValueError: bad")]),
    ],
)
def test_the_models_own_failures_are_not_infrastructure(trajectory):
    assert infra_failure(trajectory) is None
