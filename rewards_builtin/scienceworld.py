"""``scienceworld_score``: the ScienceWorld task score a trajectory ended with, in [0, 1].

Every ``sw_act`` / ``sw_look`` / ``sw_inventory`` / ``sw_task`` observation ends with the line
``Score: s/100.``, written by the tool from the simulator's score (never by the model). The
reward reads that line from the trajectory's last successful such call: the score the agent
ended with, the same one the model saw. It needs no env to outlive its chain (pools reset and
reuse envs as soon as a chain ends), starts no JVM, and scores saved trajectories offline.
Replaying the actions instead would cost a JVM start (about 1 s) or a shared JVM's load
(0.2-0.4 s) per trajectory. A chain that never acted scores 0; a failed task (ScienceWorld's
-100, e.g. focusing on the wrong thing) scores 0.
"""

from __future__ import annotations

import re
from typing import Any

from agentfly_cli.components.rewards import reward
from envs_builtin.scienceworld_sim import MAX_SCORE
from rewards_builtin.calls import call_records

SCORED_TOOLS = ("sw_act", "sw_look", "sw_inventory", "sw_task")
_SCORE_LINE = re.compile(r"(?:^|\n)(?:[^\n]*\. )?Score: (-?\d+)/(\d+)\.\s*$")


def final_score(trajectory: Any) -> dict[str, Any] | None:
    """The score line of the last successful scored tool call: ``score``, ``won``,
    ``failed``, ``calls`` (how many scored calls); None when there was none."""
    found, count = None, 0
    for record in call_records(trajectory):
        if record.get("status") != "ok" or record.get("name") not in SCORED_TOOLS:
            continue
        match = _SCORE_LINE.search(str(record.get("observation") or ""))
        if match is None:
            continue
        count += 1
        found = (int(match.group(1)), match.group(0))
    if found is None:
        return None
    score, line = found
    return {
        "score": score,
        "won": "The task is complete." in line,
        "failed": "The task has failed." in line,
        "calls": count,
    }


@reward
def scienceworld_score(trajectory) -> dict:
    """The ScienceWorld score the trajectory ended with over 100 (a failed task: 0)."""
    state = final_score(trajectory)
    if state is None:
        return {"reward": 0.0, "score": 0, "won": False, "failed": False, "calls": 0}
    value = min(max(state["score"], 0), MAX_SCORE) / MAX_SCORE
    return {"reward": value, **state}
