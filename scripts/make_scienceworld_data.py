"""Write the packaged ScienceWorld tasks (deterministic; needs scienceworld and Java 17).

ScienceWorld's 30 tasks and their variations ship inside its jar, so nothing is downloaded.
This picks the short ones (gold paths of 1-16 actions, 1-6 with teleporting) and, for each,
seeded variations from ScienceWorld's own train split, all with the ``easy`` simplifications
(teleporting, open doors and containers, no electrical actions, self-watering pots):

- ``find-living-thing``, ``find-non-living-thing``, ``find-animal``, ``find-plant``: focus on
  a thing of that kind, then move it into the named box.
- ``lifespan-longest-lived``, ``lifespan-shortest-lived``,
  ``lifespan-longest-lived-then-shortest-lived``: focus on the animal(s) with the longest /
  shortest life span.

Each task is played once along ScienceWorld's gold action sequence (``generateGoldPath``)
before it is kept: it must reach the full score. Its walks between rooms are then replaced by
teleports where the shorter path still reaches the full score, and that path is the row's
``solution`` (the recipe's warm start plays it). Everything else written is the same on every
run: the solution may differ, since ScienceWorld's planner picks among equally good targets
(the dove or the blue jay egg) and not always the same one, and the first observation (the user
message, after the task description) has its lists sorted (ScienceWorld lists things of one
kind, such as three cups of paint, in an order that differs between runs).

``--walkthrough FILE`` also writes the gold paths as a script for
``agentfly rollout scienceworld --backend scripted --script FILE``.

Run: python scripts/make_scienceworld_data.py [--walkthrough walkthrough.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs_builtin.scienceworld_sim import MAX_SCORE, Simulator, tidy  # noqa: E402

OUT = ROOT / "agentfly_cli" / "recipes" / "data" / "scienceworld.jsonl"
SIMPLIFICATIONS = "easy"
TASKS = {  # task name: (ScienceWorld's name of the task, how many variations)
    "find-living-thing": ("Find a living thing", 50),
    "find-non-living-thing": ("Find a non-living thing", 50),
    "find-animal": ("Find an animal", 50),
    "find-plant": ("Find a plant", 50),
    "lifespan-longest-lived": ("Identify longest-lived animal", 20),
    "lifespan-shortest-lived": ("Identify shortest-lived animal", 20),
    "lifespan-longest-lived-then-shortest-lived": (
        "Identify longest-then-shortest-lived animal",
        20,
    ),
}
SEED = 2025


def gold_path(sim: Simulator, task_name: str, variation: int) -> list[str]:
    """ScienceWorld's gold actions for a task (without answers to ambiguity prompts by
    number), cut where the score reaches 100 (checked by playing them on a fresh load), and
    shortened with teleporting where that still reaches 100 (see :func:`teleported`)."""
    gold = sim.plan(task_name, variation, SIMPLIFICATIONS)
    played = played_to_full_score(sim, task_name, variation, gold)
    if played is None:
        raise RuntimeError(f"{task_name} #{variation}: the gold path does not score 100")
    return shortest_path(sim, task_name, variation, played)


def played_to_full_score(
    sim: Simulator, task_name: str, variation: int, actions: list[str]
) -> list[str] | None:
    """``actions`` cut where a fresh load of the task reaches 100; None if it never does."""
    sim.load(task_name, variation, SIMPLIFICATIONS)
    sim.reset()
    for count, action in enumerate(actions, 1):
        sim.step(action)
        if sim.score() >= MAX_SCORE:
            return actions[:count]
    return None


def teleported(actions: list[str]) -> list[str]:
    """The planner's walk (``open door to R``, ``go to R``, room after room) as one
    ``teleport to R`` per destination: the easy simplifications open every door and allow
    teleporting, as the recipe's prompt and worked example do. 16 actions become 6."""
    out: list[str] = []
    for action in actions:
        if action.startswith("open door to "):
            continue
        if action.startswith("go to "):
            step = "teleport to " + action.removeprefix("go to ")
            if out and out[-1].startswith("teleport to "):
                out[-1] = step  # walking through a room on the way: straight to the last
            else:
                out.append(step)
            continue
        out.append(action)
    return out


def shortest_path(sim: Simulator, task_name: str, variation: int, gold: list[str]) -> list[str]:
    """The teleporting version of a gold path when it also reaches 100, else the gold path."""
    short = teleported(gold)
    if short == gold:
        return gold
    return played_to_full_score(sim, task_name, variation, short) or gold


def sorted_lists(text: str) -> str:
    """``text`` with each run of tab-indented list lines sorted. ScienceWorld lists things of
    the same kind (three wood cups of paint) in an order that differs between JVMs."""
    lines, out = text.split("\n"), []
    while lines:
        if lines[0].startswith("\t"):
            run = []
            while lines and lines[0].startswith("\t"):
                run.append(lines.pop(0))
            out.extend(sorted(run))
        else:
            out.append(lines.pop(0))
    return "\n".join(out)


def task_row(sim: Simulator, task_name: str, variation: int) -> dict:
    sim.load(task_name, variation, SIMPLIFICATIONS)
    first = sorted_lists(tidy(sim.reset()))
    description = tidy(sim.task_description())
    return {
        "task_name": task_name,
        "variation": variation,
        "simplifications": SIMPLIFICATIONS,
        "question": f"{description}\n\n{first}",
        "task_description": description,
        "task": TASKS[task_name][0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--walkthrough", type=Path, help="also write the gold paths as a script")
    args = parser.parse_args()
    rng = random.Random(SEED)
    sim = Simulator()
    rows, walkthrough = [], []
    try:
        for task_name, (_, count) in TASKS.items():
            sim.load(task_name, 0, SIMPLIFICATIONS)
            for variation in sorted(rng.sample(sim.variations("train"), count)):
                row = task_row(sim, task_name, variation)
                gold = gold_path(sim, task_name, variation)
                rows.append({"id": f"sw-{len(rows):03d}", **row, "solution": gold})
                actions = [f"ACTION: {a}" for a in gold]
                walkthrough.append({"id": rows[-1]["id"], "responses": actions})
                print(f"{rows[-1]['id']} {task_name} #{variation}: {len(gold)} gold actions")
    finally:
        sim.close()
    with open(args.out, "w") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)
    print(f"wrote {len(rows)} tasks to {args.out}")
    if args.walkthrough:
        with open(args.walkthrough, "w") as out:
            out.writelines(json.dumps(line) + "\n" for line in walkthrough)
        print(f"wrote their gold paths to {args.walkthrough}")


if __name__ == "__main__":
    main()
