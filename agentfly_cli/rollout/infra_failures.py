"""Whether a chain ended for a reason outside the model (an infrastructure failure), and which.

:func:`infra_failure` reads a finished :class:`~agentfly_cli.trajectory.Trajectory` and names
the cause, or returns None when whatever happened is the model's own doing. The trainer leaves
such chains out of their group's statistics and out of the loss (``trainer.algorithm.
exclude_infra_failures``): scoring them 0 would tell the model it failed when the sandbox did.

Infrastructure (the cause names, in the order they are checked):

- ``env_start``: an env did not start, reset, or could not be leased (``EnvStartError``,
  ``AcquireTimeout``, ``PoolClosed``, ``EnvPoolError``), for a tool call or the opening env;
- ``env_died``: an env or sandbox died under a call (``EnvProcessDied``, ``RayEnvGone``, a pool
  server gone, a broken connection: ``ConnectionError`` and its kind, ``EOFError``), or its
  lease ran out (``LeaseExpired``);
- ``backend``: the LLM backend failed or aborted the chain (a turn-engine ``abort``);
- ``gateway``: an agent program's request to our gateway failed at the connection or with a
  server error (its client's ``APIConnectionError``, ``InternalServerError``, ...);
- ``reward_timeout`` / ``reward_error``: the reward timed out or raised.

The model's own failures stay rewards: a malformed or unknown tool call, bad arguments, a tool
that raises on what the model sent or times out on it, a wrong answer, the turn limit, the
length limit. An agent program's own crash (``AgentError`` from its code, ``AgentExit``,
``AgentInterrupt``) and its ``AgentTimeout`` are the policy's too: the program is part of
what is trained, so they are not infrastructure unless the crash is a gateway failure.
"""

from __future__ import annotations

import re

from agentfly_cli.trajectory import ToolCallRecord, Trajectory

INFRA_CAUSES = (
    "env_start",
    "env_died",
    "backend",
    "gateway",
    "reward_timeout",
    "reward_error",
)
#: exception names (a tool's ``info["exception"]``, an abort's error prefix) by cause
ENV_START = frozenset({"EnvStartError", "AcquireTimeout", "PoolClosed", "EnvPoolError"})
ENV_DIED = frozenset(
    {
        "EnvProcessDied",
        "RayEnvGone",
        "ServerGone",
        "FrameError",
        "LeaseExpired",
        "ConnectionError",
        "ConnectionResetError",
        "ConnectionRefusedError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "EOFError",
        "IncompleteReadError",
    }
)
#: what an agent's OpenAI/Anthropic/httpx client raises when our gateway, not the model, failed
GATEWAY = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "InternalServerError",
        "ServiceUnavailableError",
        "ConnectError",
        "ConnectTimeout",
        "RemoteProtocolError",
        "ReadError",
        "ServerDisconnectedError",
    }
    | ENV_DIED
)
#: the kinds of :class:`~agentfly_cli.rollout.agent_calls.AgentFailed` (an agent episode's error)
AGENT_KINDS = ("AgentError", "AgentExit", "AgentInterrupt", "AgentTimeout")
_COULD_NOT_RUN = re.compile(r"^tool '[^']*' could not run: ([A-Za-z_][A-Za-z0-9_.]*):")
_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*:")
_REWARD_TIMEOUT = re.compile(r"reward '[^']*' timed out after")
_REWARD_FAILED = re.compile(r"reward '[^']*' (failed|needs|must|returned)|^reward '")


def infra_failure(trajectory: Trajectory) -> str | None:
    """The infrastructure cause that ended (or spoiled) ``trajectory`` (one of
    :data:`INFRA_CAUSES`), or None when its outcome is the model's own."""
    if trajectory.finish_reason == "abort":
        return _abort_cause(trajectory.error or "")
    for call in trajectory.tool_calls:
        cause = _exception_cause(_call_exception(call))
        if call.status == "error" and cause is not None:
            return cause
    error = trajectory.reward_extras.get("error") if trajectory.reward_extras else None
    if isinstance(error, str) and error:
        if _REWARD_TIMEOUT.search(error):
            return "reward_timeout"
        if _REWARD_FAILED.search(error):
            return "reward_error"
    return None


def _call_exception(call: ToolCallRecord) -> str:
    """The exception a failed call raised: the tool's (``info["exception"]``), or the one
    that kept it from running (the engine's ``"tool 'x' could not run: Type: ..."``)."""
    name = (call.info or {}).get("exception")
    if isinstance(name, str):
        return name
    match = _COULD_NOT_RUN.match(call.observation or "")
    return match.group(1) if match else ""


def _exception_cause(name: str) -> str | None:
    name = name.rsplit(".", 1)[-1]
    if name in ENV_START:
        return "env_start"
    if name in ENV_DIED:
        return "env_died"
    return None


def _abort_cause(error: str) -> str | None:
    """An aborted chain: an agent episode's error (``"AgentError: Type: message"``) is the
    agent's unless the type is a gateway failure; any other abort is the backend's, or the
    env's when the exception names one."""
    match = _NAME.match(error)
    name = match.group(1) if match else ""
    if name in AGENT_KINDS:
        if name != "AgentError":
            return None
        inner = _NAME.match(error[match.end() :])
        inner_name = inner.group(1).rsplit(".", 1)[-1] if inner else ""
        return "gateway" if inner_name in GATEWAY else None
    return _exception_cause(name) or "backend"
