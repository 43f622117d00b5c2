"""``scienceworld``: a ScienceWorld task per trajectory, and the ``sw_*`` tools that play it.

Each env owns one JVM (:class:`~envs_builtin.scienceworld_sim.Simulator`), started in
``start()``. ``reset(task)`` loads the row's ``task_name`` and ``variation`` (with its
``simplifications``, default ``easy``); actions are ScienceWorld action strings such as
``open door to kitchen`` or ``focus on red box``. Calls into the JVM block, so they run in
worker threads, one at a time per env. Actions and results are JSON values, so the env also
runs in child processes, on Ray or behind a pool server. See ``docs/recipes/scienceworld.md``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.tools import ToolResult, tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from envs_builtin.scienceworld_sim import JAVA_OPTIONS, MAX_SCORE, Simulator, TaskError, tidy

MAX_ACTION_CHARS = 200
MAX_LISTED_ACTIONS = 40
STEP_LIMIT = 100
CALL_GRACE_S = 5.0  # after a cancelled call, how long to wait for its thread before moving on
FORBIDDEN = {"reset task": "the task is reset between episodes, not by the agent"}
UNKNOWN = "No known action matches that input."
HINT = (
    "Actions look like: look around, go to kitchen, open door to kitchen, pick up apple, "
    "focus on apple, move apple to red box, look at apple, inventory, task."
)
AMBIGUOUS = "Ambiguous request"


class ScienceWorldEnv(BaseEnv):
    """One ScienceWorld JVM, one task at a time.

    Actions: an action string, ``{"action": "open door to kitchen"}``, or ``{"op": ...}`` with
    ``look``, ``inventory``, ``task`` (free: no move), ``valid_actions`` (every valid action
    now) or ``state``. Results are dicts: ``observation``, ``score`` (0-100; -100 when failed),
    ``won``, ``failed``, ``done``, ``moves`` (and ``valid_actions`` for that op). Actions after
    the end do not reach the simulator.
    """

    def __init__(
        self,
        simplifications: str = "easy",
        step_limit: int = STEP_LIMIT,
        java_options: list[str] | tuple[str, ...] = JAVA_OPTIONS,
        max_action_chars: int = MAX_ACTION_CHARS,
    ) -> None:
        self.simplifications = simplifications
        self.step_limit = step_limit
        self.java_options = tuple(java_options)
        self.max_action_chars = max_action_chars
        self.sim: Simulator | None = None
        self.task: dict[str, Any] | None = None  # task_name, variation, simplifications
        self._state: dict[str, Any] = {}
        self._lock = asyncio.Lock()
        self._sim_lock = threading.Lock()  # guards self.sim between start() and close()
        self._interrupted = False
        self.closed = False

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the JVM (about 1 s). A cancelled start still stops the JVM once it is up."""
        launch = asyncio.ensure_future(asyncio.to_thread(self._launch))
        try:
            await asyncio.shield(launch)
        except asyncio.CancelledError:
            with self._sim_lock:
                self.closed = True  # _launch stops the JVM it is starting
            launch.add_done_callback(lambda done: done.cancelled() or done.exception())
            raise

    def _launch(self) -> None:
        sim = Simulator(self.java_options)
        with self._sim_lock:
            if not self.closed:
                self.sim = sim
                return
        sim.close()

    async def reset(self, task: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        self.task, self._state = None, {}
        if task is None:
            return None  # the next reset loads the next task: nothing to free
        spec = task_spec(task, self.simplifications)
        return await self._call(self._load, spec)

    async def step(self, action: Any) -> dict[str, Any]:
        if self.closed:
            raise RuntimeError("the ScienceWorld env is closed")
        if isinstance(action, str):
            action = {"action": action}
        if not isinstance(action, Mapping):
            raise TypeError("a ScienceWorld action is a string or a dict with 'action'")
        op = action.get("op", "act")
        if op not in ("act", "look", "inventory", "task", "valid_actions", "state"):
            raise ValueError(f"unknown op {op!r}; use act, look, inventory, task, valid_actions")
        if self.task is None:
            raise RuntimeError("no task is loaded: the env needs a task with a 'task_name' field")
        if op == "act":
            text = self._checked(action.get("action"))
            if self._state["done"]:
                return {**self._state, "observation": "The task is over."}
            return await self._call(self._act, text)
        if op == "state":
            return dict(self._state)
        if self._state["done"] and op == "valid_actions":
            return {**self._state, "valid_actions": []}
        return await self._call(self._free, op)

    async def close(self) -> None:
        with self._sim_lock:
            if self.closed and self.sim is None:
                return
            self.closed = True
            sim, self.sim = self.sim, None
        if sim is not None:
            await asyncio.to_thread(sim.close)

    async def healthy(self) -> bool:
        if self.closed or self._interrupted or self.sim is None or not self.sim.alive():
            return False
        try:
            await self._call(self.sim.moves)  # a round trip to the JVM
        except Exception:  # noqa: BLE001 - any failure means: replace this env
            return False
        return True

    # -- blocking work, in a worker thread ------------------------------------------------------
    async def _call(self, func, *args):
        """Run ``func`` in a thread, one call at a time. A cancelled call marks the env
        unhealthy (the simulator's state is unknown) after waiting briefly for the thread."""
        async with self._lock:
            if self.sim is None:
                raise RuntimeError(
                    "the ScienceWorld env is not started" + " (closed)" * self.closed
                )
            task = asyncio.ensure_future(asyncio.to_thread(func, *args))
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                self._interrupted = True
                await asyncio.wait([task], timeout=CALL_GRACE_S)
                raise

    def _load(self, spec: dict[str, Any]) -> dict[str, Any]:
        sim = self._sim()
        sim.load(spec["task_name"], spec["variation"], spec["simplifications"])
        observation = sim.reset()
        self.task = spec
        return self._record(observation)

    def _act(self, action: str) -> dict[str, Any]:
        observation = self._sim().step(action)
        return self._record(observation)

    def _free(self, op: str) -> dict[str, Any]:
        sim = self._sim()
        if op == "valid_actions":
            valid = set(sim.valid_actions()) - set(FORBIDDEN)
            return {**self._state, "valid_actions": sorted(valid)}
        text = {"look": sim.look, "inventory": sim.inventory, "task": sim.task_description}[op]()
        return {**self._state, "observation": tidy(text)}

    def _record(self, observation: str) -> dict[str, Any]:
        sim = self._sim()
        score, moves = sim.score(), sim.moves()
        won = score >= MAX_SCORE
        failed = score < 0
        self._state = {
            "observation": tidy(observation),
            "score": score,
            "won": won,
            "failed": failed,
            "done": won or failed or sim.completed() or moves > self.step_limit,
            "moves": moves,
        }
        return dict(self._state)

    def _sim(self) -> Simulator:
        if self.sim is None:
            raise RuntimeError("the ScienceWorld env is closed")
        return self.sim

    def _checked(self, action: Any) -> str:
        if not isinstance(action, str) or not action.strip():
            raise ValueError("give a ScienceWorld action, e.g. 'look around' or 'go to kitchen'")
        if "\n" in action.strip():
            raise ValueError("give one action per call (no line breaks)")
        action = " ".join(action.split())
        if len(action) > self.max_action_chars:
            raise ValueError(f"the action is longer than {self.max_action_chars} characters")
        if action.lower() in FORBIDDEN:
            raise ValueError(f"'{action}' is not allowed: {FORBIDDEN[action.lower()]}")
        return action


def task_spec(task: Mapping[str, Any], simplifications: str = "easy") -> dict[str, Any]:
    """The ScienceWorld task of a dataset row: ``task_name``, ``variation`` (default 0) and
    ``simplifications`` (default: the env's)."""
    name = task.get("task_name")
    if not isinstance(name, str) or not name.strip():
        raise TaskError(
            "the task needs a 'task_name' field: a ScienceWorld task such as "
            "find-living-thing (and a 'variation' number)"
        )
    variation = task.get("variation", 0)
    if isinstance(variation, bool) or not isinstance(variation, int):
        raise TaskError(f"the task's 'variation' must be a whole number, not {variation!r}")
    chosen = task.get("simplifications", simplifications)
    if not isinstance(chosen, str):
        raise TaskError("the task's 'simplifications' must be a string such as 'easy'")
    return {"task_name": name.strip(), "variation": variation, "simplifications": chosen}


SCIENCEWORLD = EnvSpec(
    name="scienceworld",
    factory=ScienceWorldEnv,
    description="A ScienceWorld task per trajectory, one JVM each (sw_act / sw_look / "
    "sw_inventory / sw_task / sw_actions)",
    pool_max=8,
    warm_size=0,
    start_timeout=60.0,
    resources={"cpu": 0.5, "memory_mb": 350.0},
)


def render(result: Mapping[str, Any]) -> ToolResult:
    """A simulator result as the model sees it: the text, then ``Score: s/100.``, always the
    last line (the ``scienceworld_score`` reward reads it); the call ends the episode when the
    task is over."""
    text = result["observation"]
    if text == UNKNOWN:
        text += " " + HINT
    elif text.startswith(AMBIGUOUS):
        text += "\nAnswer with the number of the action you meant."
    status = f"Score: {result['score']}/{MAX_SCORE}."
    if result["won"]:
        status = "The task is complete. " + status
    elif result["failed"]:
        status = "The task has failed. " + status
    elif result["done"]:
        status = "The step limit is reached. " + status
    return ToolResult(
        f"{text}\n{status}",
        terminal=bool(result["done"]),
        info={"score": result["score"], "done": result["done"]},
    )


@tool(env="scienceworld")
async def sw_act(env: ScienceWorldEnv, action: str) -> ToolResult:
    """Do one ScienceWorld action, e.g. 'look around', 'open door to kitchen', 'go to kitchen',
    'pick up thermometer', 'focus on apple', 'move apple to red box', 'wait1'.

    Args:
        action: One action (an ambiguous action is answered with a numbered list: act again
            with the number).
    """
    return render(await env.step({"action": action}))


@tool(env="scienceworld")
async def sw_look(env: ScienceWorldEnv) -> ToolResult:
    """Describe the room you are in and what is in it (uses no move)."""
    return render(await env.step({"op": "look"}))


@tool(env="scienceworld")
async def sw_inventory(env: ScienceWorldEnv) -> ToolResult:
    """List what you carry (uses no move)."""
    return render(await env.step({"op": "inventory"}))


@tool(env="scienceworld")
async def sw_task(env: ScienceWorldEnv) -> ToolResult:
    """Repeat the task description (uses no move)."""
    return render(await env.step({"op": "task"}))


@tool(env="scienceworld")
async def sw_actions(env: ScienceWorldEnv, contains: str = "") -> str:
    """List valid actions now (shortest first, at most 40; uses no move).

    Args:
        contains: Only actions containing this text, e.g. 'kitchen' or 'focus on'.
    """
    actions = (await env.step({"op": "valid_actions"}))["valid_actions"]
    needle = " ".join(contains.lower().split())
    if needle:
        actions = [a for a in actions if needle in a.lower()]
    if not actions:
        return "(no valid actions" + (f" containing '{contains}')" if needle else ")")
    actions.sort(key=lambda a: (len(a.split()), a))
    listed = "\n".join(actions[:MAX_LISTED_ACTIONS])
    more = len(actions) - MAX_LISTED_ACTIONS
    if more > 0:
        listed += f"\n... and {more} more; pass 'contains' to narrow the list"
    return listed
