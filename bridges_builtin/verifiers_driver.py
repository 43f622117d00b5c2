"""The verifiers bridge's driver: a script run by the verifiers venv's python, never imported
by agentfly (it imports only verifiers and the standard library).

``python verifiers_driver.py tasks ENV_ID SIZE`` prints the environment's dataset rows as
JSONL; ``python verifiers_driver.py episode`` reads one JSON request on stdin (the task row,
the gateway's base URL, the model name) and prints one JSON line: the rubric's reward and its
named metrics. This is the classic API (``verifiers.legacy``: ``load_environment``,
``env.rollout``, ``rubric.score_rollout``); 0.4's Taskset/Harness is verifiers_driver_v04.py.
"""

import asyncio
import json
import os
import sys


def _load(env_id, args):
    import verifiers as vf

    if not hasattr(vf, "load_environment"):  # 0.4: only verifiers.v1 (Taskset/Harness)
        sys.exit(
            f"verifiers {vf.__version__} has no classic load_environment: its Taskset/Harness "
            "API runs with --set verifiers.api=0.4 (docs/bridges/verifiers.md)"
        )
    return vf.load_environment(env_id, **(args or {}))


def tasks(env_id, size):
    env = _load(env_id, {})
    data = env.get_eval_dataset() if env.dataset is None else env.get_dataset()
    for i, row in enumerate(data):
        if i >= size:
            break
        out = {
            "id": f"{env_id}-{i}",
            "messages": row.get("prompt"),
            "answer": row.get("answer", ""),
            "task": row.get("task", "default"),
            "info": row.get("info") or {},
            "example_id": row.get("example_id", i),
        }
        print(json.dumps(out, default=str))


async def episode(request):
    from verifiers.types import ClientConfig

    task = request["task"]
    env = _load(task["verifiers"]["env_id"], task["verifiers"].get("args"))
    os.environ.setdefault("VERIFIERS_GATEWAY_KEY", "agentfly")
    client = ClientConfig(api_base_url=request["base_url"], api_key_var="VERIFIERS_GATEWAY_KEY")
    rollout_input = {
        "prompt": task["messages"],
        "example_id": task.get("example_id", 0),
        "answer": task.get("answer", ""),
        "info": task.get("info") or {},
    }
    sampling = request.get("sampling") or {}
    state = await env.rollout(rollout_input, client, request["model"], sampling)
    await env.rubric.score_rollout(state)
    if state.get("error"):
        raise RuntimeError(f"the environment failed: {state['error']}")
    return {"reward": float(state["reward"]), "metrics": dict(state.get("metrics") or {})}


def main():
    if sys.argv[1] == "tasks":
        tasks(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "episode":
        print(json.dumps(asyncio.run(episode(json.loads(sys.stdin.read())))))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}: give tasks or episode")


if __name__ == "__main__":
    main()
