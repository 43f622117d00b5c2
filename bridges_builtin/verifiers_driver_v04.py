"""The verifiers bridge's driver for verifiers 0.4 (``verifiers.v1``: Taskset/Harness): a script
run by the 0.4 venv's python, never imported by agentfly (it imports only verifiers and the
standard library).

``python verifiers_driver_v04.py tasks TASKSET_ID SIZE [HARNESS]`` prints the taskset's own
``load()`` (through ``Taskset.__iter__``, which numbers the tasks) as JSONL, after loading
HARNESS; ``... episode`` reads one JSON request on stdin (the task row, the gateway's base
URL, the model name) and prints one JSON line: the episode's reward and its named metrics.
The episode is the env's own: the taskset's ``Env`` (``SingleAgentEnv`` for a plain
taskset), its harness program in the local subprocess runtime, every model call going
through verifiers' interception server to the gateway. See docs/bridges/verifiers.md.
"""

import asyncio
import itertools
import json
import os
import sys

#: the harness of a taskset that ships none: verifiers' tool-less chat loop (its default,
#: ``bash``, hands the model a shell on this machine)
FALLBACK_HARNESS = "null"


def _env(taskset_id, args=None, harness=None):
    import verifiers.v1 as vf

    own = vf.default_harness_id(taskset_id)
    harness = harness or (own if own != "bash" else FALLBACK_HARNESS)
    config = vf.resolve_env_config(
        {
            "taskset": {"id": taskset_id, **(args or {})},
            "agent": {"harness": {"id": harness}, "runtime": {"type": "subprocess"}},
        }
    )
    return vf.load_environment(config)


def _messages(data):
    """The task's opening messages, as the harness sends them (system, then the prompt)."""
    prompt = data.prompt
    if prompt is None:
        turns = []
    elif isinstance(prompt, str):
        turns = [{"role": "user", "content": prompt}]
    else:
        turns = [m.model_dump(mode="json", exclude_none=True) for m in prompt]
    system = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    return system + turns


def tasks(taskset_id, size, harness=None):
    env = _env(taskset_id, harness=harness)  # a harness that does not load fails here
    for task in itertools.islice(iter(env.taskset), size):
        data = task.data
        fields = data.model_dump(mode="json", exclude_none=True)
        out = {
            "id": f"{taskset_id}-{data.idx}",
            "messages": _messages(data),
            "answer": str(fields.get("answer", "")),
            "info": {"key": task.key, "name": data.name, "task_id": data.id},
            "example_id": data.idx,
        }
        print(json.dumps(out, default=str))


def _task(env, idx):
    for task in itertools.islice(iter(env.taskset), idx, idx + 1):
        return task
    raise LookupError(f"taskset {env.config.taskset.id!r} has no task {idx} any more")


def _result(episode):
    """The episode's reward (the sum of its traces' weighted rewards) and named metrics; a
    failed episode raises with its first error."""
    errors = list(episode.errors) + [e for t in episode.traces for e in t.errors]
    if errors or not episode.ok:
        first = errors[0] if errors else None
        detail = f"{first.type}: {first.message}" if first else "it did not complete"
        raise RuntimeError(f"the environment failed: {detail}")
    metrics = {}
    for trace in episode.traces:
        metrics.update({k: v for k, v in trace.metrics.items() if v is not None})
        metrics.update({k: r.score for k, r in trace.rewards.items() if r is not None})
    reward = sum(trace.reward for trace in episode.traces)
    return {"reward": float(reward), "metrics": metrics}


async def episode(request):
    import verifiers.v1 as vf

    task_row = request["task"]
    spec = task_row["verifiers"]
    env = _env(spec["env_id"], spec.get("args"), spec.get("harness"))
    task = _task(env, int(task_row["example_id"]))
    os.environ.setdefault("VERIFIERS_GATEWAY_KEY", "agentfly")
    client = vf.EvalClientConfig(base_url=request["base_url"], api_key_var="VERIFIERS_GATEWAY_KEY")
    ctx = vf.ModelContext(model=request["model"], client=client)
    async with env.serving():
        result = await env.run_episode(task, ctx)
    return _result(result)


async def prepare():
    """Sync verifiers' chat program (the null/bash harnesses' PEP 723 script) once, as an
    episode's runtime does; prints its interpreter. The install step runs it."""
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes import SubprocessConfig
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    runtime = SubprocessRuntime(SubprocessConfig())
    await runtime.start()
    try:
        argv = await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, {}, activate=False)
    finally:
        await runtime.teardown()
    return argv[0]


def main():
    if sys.argv[1] == "prepare":
        print(asyncio.run(prepare()))
    elif sys.argv[1] == "tasks":
        tasks(sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
    elif sys.argv[1] == "episode":
        print(json.dumps(asyncio.run(episode(json.loads(sys.stdin.read())))))
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}: give tasks, episode or prepare")


if __name__ == "__main__":
    main()
