"""The verifiers bridge's driver: a script run by the verifiers venv's python, never imported
by agentfly (it imports only verifiers and the standard library).

``python verifiers_driver.py tasks ENV_ID SIZE`` prints the environment's dataset rows as
JSONL; ``python verifiers_driver.py episode`` reads one JSON request on stdin (the task row,
the gateway's base URL, the model name) and prints one JSON line: the rubric's reward and its
named metrics. Only the classic 0.3 API (``load_environment``, ``env.rollout``,
``rubric.score_rollout``) is driven so far; see docs/bridges/verifiers.md.
"""

import asyncio
import inspect
import json
import sys


def _load(env_id, args):
    import verifiers as vf

    return vf.load_environment(env_id, **(args or {}))


def tasks(env_id, size):
    env = _load(env_id, {})
    data = env.get_eval_dataset() if env.dataset is None else env.get_dataset()
    for i, row in enumerate(data):
        if i >= size:
            break
        out = {
            "id": f"{env_id}-{i}",
            "prompt": row.get("prompt"),
            "answer": row.get("answer", ""),
            "task": row.get("task", "default"),
            "info": row.get("info") or {},
        }
        print(json.dumps(out, default=str))


async def _maybe(value):
    return await value if inspect.isawaitable(value) else value


async def episode(request):
    from openai import AsyncOpenAI

    task = request["task"]
    env = _load(task["verifiers"]["env_id"], task["verifiers"].get("args"))
    client = AsyncOpenAI(base_url=request["base_url"], api_key="agentfly")
    sampling = request.get("sampling") or {}
    prompt, answer = task["prompt"], task.get("answer", "")
    info, kind = task.get("info") or {}, task.get("task", "default")
    completion, state = await _maybe(
        env.rollout(client, request["model"], prompt, answer, kind, info, sampling)
    )
    score = await _maybe(env.rubric.score_rollout(prompt, completion, answer, state, kind, info))
    return {"reward": float(score.reward), "metrics": dict(score.metrics or {})}


def main():
    if sys.argv[1] == "tasks":
        tasks(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "episode":
        print(json.dumps(asyncio.run(episode(json.loads(sys.stdin.read())))))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}: give tasks or episode")


if __name__ == "__main__":
    main()
