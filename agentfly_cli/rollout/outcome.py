"""A rollout in which every chain aborted has no data: say so, with the cause and the fix.

Some chains aborting is data (the summary counts them). All of them aborting means that the
run itself is broken (a chat template that rejects the conversation, a backend or server that
died), and a table of zeros with exit code 0 would hide it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from agentfly_cli.errors import UserError
from agentfly_cli.trajectory import Trajectory

# the error's class name (the engine records "Type: message") -> what to do about it
_FIXES = {
    "ChatTemplateError": "pass a --template that renders this conversation (e.g. hermes or "
    "chatml-tools), or fix the messages",
    "ServerError": "start the server (or fix backend.base_url / --base-url) and run again",
    "BackendUnavailableError": "install or configure the backend, or pick another with --backend",
    "AgentError": "fix the agent function (agent.entry); it raised: run it alone against "
    "`agentfly serve` to see why",
    "AgentTimeout": "raise agent.timeout_s, or find where the agent waits (fewer episodes at "
    "once: agent.concurrency)",
    "AgentExit": "the agent function called sys.exit(): return from it instead (a number is "
    "the reward, text the answer)",
    "AgentInterrupt": "the agent function raised KeyboardInterrupt: return or raise an "
    "ordinary exception instead",
    "AgentBadResult": "return a finite number (the reward) or a str (the answer the run's "
    "reward scores) from the agent function",
}
_DEFAULT_FIX = (
    "fix the cause above (the backend, the model, the chat template) and run again; "
    "AGENTFLY_DEBUG=1 shows more"
)


class AllChainsAbortedError(UserError):
    """Every chain of a rollout (or of a training step) aborted."""


def abort_cause(error: str | None) -> str:
    """The class name of a recorded ``"Type: message"`` error ('' when it has none)."""
    head = (error or "").split(":", 1)[0]
    return head if head.isidentifier() else ""


def check_some_chain_ran(
    trajectories: Sequence[Trajectory],
    what: str = "rollout",
    *,
    total: Callable[[float], float] | None = None,
) -> None:
    """Raise :class:`AllChainsAbortedError` when there are chains and every one aborted.

    ``total`` sums a count over the ranks of a distributed run, so that all of them raise or
    none does.
    """
    ran = sum(1 for t in trajectories if t.finish_reason != "abort")
    chains = len(trajectories)
    if total is not None:
        ran, chains = int(total(ran)), int(total(chains))
    if chains == 0 or ran:
        return
    errors = [t.error or "no error recorded" for t in trajectories] or ["on another rank"]
    causes = Counter(abort_cause(e) or "error" for e in errors)
    cause, _ = causes.most_common(1)[0]
    first = next((e for e in errors if (abort_cause(e) or "error") == cause), errors[0])
    first = " ".join(first.split())
    if len(first) > 300:
        first = first[:300] + "..."
    fix = _FIXES.get(cause, _DEFAULT_FIX)
    raise AllChainsAbortedError(
        f"all {chains} chains of the {what} aborted, so it has no data; e.g. {first}; to fix: {fix}"
    )
