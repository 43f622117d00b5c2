"""Per-task tools: 1,000 BFCL-like rows, each with its own tool set, against the same rows all
sharing one set. Prints one JSON object.

Each row brings 2-4 functions as BFCL writes them (bare objects, "dict", "float", ...). Per
row, through the engine's own code (RolloutEngine and its TaskTools, ChatTemplate, the parser;
nothing re-implemented here): the chain's tool set, the first prompt rendered (template and
tokens) and one tool-call response parsed, planned and its call checked against the row's
schema. Two measures:

  render_parse  those steps called in a loop, as the engine calls them (the target: the
                distinct sets within 1.2x of the shared set);
  engine_run    RolloutEngine.run over the rows, one chain each, with an instant backend that
                answers each row's call (on_call: end): the whole chain path.

Every run starts from a fresh ChatTemplate and engine (no cache carries over between runs),
runs alternate between the two sets, and the median of --repeats runs is reported, in wall
seconds and in this process's CPU seconds (``_cpu``), with the least CPU seconds of the runs
(``_min_cpu``: the least disturbed run on a shared machine). ``tokenize_new_text_cpu_s`` is
the engine's encoder's time (a fresh one, least of the runs) on the text that only the
distinct sets have (their tools' JSON): work the shared set does once and the distinct sets
cannot skip; ``ratio_render_parse_min_cpu_beyond_new_text`` leaves it out.
``tokenize_new_text_rust_encode_cpu_s`` is the Rust tokenizer's ``encode`` on the same text.

Run: python benchmarks/task_tools_bench.py [--rows 1000] [--repeats 3] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jsonschema  # noqa: E402, F401  (imported once, before any timing: both sides use it)

from agentfly_cli.backends.base import Backend, Generation  # noqa: E402
from agentfly_cli.chat.parsers import get_parser  # noqa: E402
from agentfly_cli.chat.templates import ChatTemplate  # noqa: E402
from agentfly_cli.rollout.engine import RolloutEngine, _Chain, _fewer_gc_passes  # noqa: E402
from agentfly_cli.rollout.prompt_warmup import warm_first_prompts  # noqa: E402
from agentfly_cli.rollout.tasks import opening_messages  # noqa: E402
from agentfly_cli.rollout.turn_plan import parse_turn, plan_turn  # noqa: E402
from agentfly_cli.settings.rollout import RolloutSettings  # noqa: E402
from agentfly_cli.trajectory import Trajectory  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SYSTEM = "You are an expert in composing functions. Call the function that answers the question."
DOMAINS = (
    "weather finance geometry music travel sports chemistry movies banking calendar maps "
    "recipes stocks physics library hotel"
).split()
VERBS = "get calculate find search convert book list estimate predict".split()
NOUNS = (
    "forecast area price route score rate schedule density review balance distance volume "
    "population duration reservation"
).split()
TYPES = ["string", "integer", "float", "boolean", "array", "dict"]


def bfcl_function(rng: random.Random, row: int, k: int) -> dict:
    """One BFCL-style function, distinct per (row, k)."""
    domain, verb, noun = rng.choice(DOMAINS), rng.choice(VERBS), rng.choice(NOUNS)
    properties, required = {}, []
    for p in range(rng.randint(1, 4)):
        kind = rng.choice(TYPES)
        name = f"{rng.choice(NOUNS)}_{p}"
        spec: dict = {"type": kind, "description": f"The {name.replace('_', ' ')} of the {noun}."}
        if kind == "array":
            spec["items"] = {"type": rng.choice(["string", "float", "integer"])}
        if kind == "dict":
            spec["properties"] = {"value": {"type": "float"}, "unit": {"type": "string"}}
        if kind == "string" and rng.random() < 0.3:
            spec["enum"] = ["low", "medium", "high"]
        properties[name] = spec
        if rng.random() < 0.6:
            required.append(name)
    return {
        "name": f"{domain}.{verb}_{noun}_{row}_{k}",
        "description": f"{verb.title()} the {noun} for {domain} requests (case {row}, tool {k}); "
        f"returns a JSON object with the result and its unit.",
        "parameters": {"type": "dict", "properties": properties, "required": required},
    }


def argument_value(spec: dict, rng: random.Random):
    kind = spec.get("type")
    if "enum" in spec:
        return spec["enum"][0]
    return {
        "string": "Berlin",
        "integer": rng.randint(1, 99),
        "float": round(rng.uniform(0, 9), 2),
        "boolean": True,
        "array": [1, 2] if spec.get("items", {}).get("type") != "string" else ["a", "b"],
        "dict": {"value": 1.5, "unit": "m"},
    }[kind]


def make_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        functions = [bfcl_function(rng, i, k) for k in range(rng.randint(2, 4))]
        rows.append({"id": f"simple_{i}", "question": f"Question {i}: {rng.choice(NOUNS)} of "
                     f"the {rng.choice(DOMAINS)} case {rng.randint(1, 10**6)}, please.",
                     "function": functions})  # fmt: skip
    return rows


def shared_rows(rows: list[dict]) -> list[dict]:
    """The same rows, all with the first row's tool set (the very same list)."""
    shared = rows[0]["function"]
    return [dict(row, function=shared) for row in rows]


def call_text(row: dict, parser: str, seed: int) -> str:
    """One response calling the row's first function with arguments of the right types."""
    rng = random.Random(seed)
    function = row["function"][0]
    properties = function["parameters"]["properties"]
    arguments = {name: argument_value(spec, rng) for name, spec in properties.items()}
    if parser == "qwen3_coder":
        body = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
            for k, v in arguments.items()
        )
        return f"<tool_call>\n<function={function['name']}>\n{body}</function>\n</tool_call>"
    if parser == "pythonic":
        keywords = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        return f"[{function['name']}({keywords})]"
    payload = json.dumps({"name": function["name"], "arguments": arguments})
    return f"<tool_call>\n{payload}\n</tool_call>"


class Replies(Backend):
    """Answers each task's first turn instantly with its precomputed ids."""

    name = "replies"

    def __init__(self, replies: list[list[int]]) -> None:
        self.replies = replies

    async def generate(self, prompt_ids, params, context=None):
        return Generation(list(self.replies[context.task_index]), None, "stop")


def make_engine(case: dict, replies=None) -> RolloutEngine:
    chat = ChatTemplate.load(case["tokenizer"], case["template"])
    settings = RolloutSettings(n=1, max_turns=1, max_total_tokens=16384, concurrency=1000)
    return RolloutEngine(
        Replies(replies or []), chat, get_parser(case["parser"]), [], None, settings,
        system_prompt=SYSTEM, tools_field="function",
    )  # fmt: skip


def render_parse(case: dict, rows: list[dict], texts: list[str], warm: bool = False) -> dict:
    """The chain's steps, as the engine calls them: its tool set, the first prompt, the parse
    and plan of one response, the call's argument check. Seconds, and per step. With ``warm``,
    first ``warm_first_prompts`` (as ``run`` calls it), timed apart (``warm_*``)."""
    engine = make_engine(case)
    steps = {"tool_set": 0.0, "render": 0.0, "parse": 0.0, "call": 0.0}
    warmed = {}
    if warm:
        started, cpu = time.perf_counter(), time.process_time()
        with _fewer_gc_passes(engine.settings.gc_threshold):
            engine.task_tools.check(rows, "bench")
            warm_first_prompts(engine, rows)
        warmed = {"warm_seconds": time.perf_counter() - started,
                  "warm_cpu_s": time.process_time() - cpu}  # fmt: skip
    calls_ok = 0

    async def go():
        nonlocal calls_ok
        clock = time.perf_counter
        for row, text in zip(rows, texts, strict=True):
            t0 = clock()
            tools = engine.task_tools.for_task(row)
            t1 = clock()
            messages = opening_messages(row, engine.system_prompt)
            engine.chat.render_prompt(messages, tools.schemas)
            t2 = clock()
            parsed = await parse_turn(tools.parser, text)
            plan = plan_turn(parsed, tools.parser, 16)
            t3 = clock()
            chain = _Chain(Trajectory(task=row), messages, tools=tools)
            result = await engine._call(chain, plan.calls[0])
            t4 = clock()
            calls_ok += result.ok
            for name, seconds in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                steps[name] += seconds

    started, cpu = time.perf_counter(), time.process_time()
    with _fewer_gc_passes(engine.settings.gc_threshold):  # as RolloutEngine.run does
        asyncio.run(go())
    total, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert calls_ok == len(rows), f"only {calls_ok} of {len(rows)} calls passed their schema"
    steps_s = {f"{k}_s": v for k, v in steps.items()}
    return {"seconds": total, "cpu_s": cpu, **steps_s, **warmed}


def engine_run(case: dict, rows: list[dict], texts: list[str]) -> dict:
    """RolloutEngine.run over the rows: one chain each, ended by its declared call."""
    probe = ChatTemplate.load(case["tokenizer"], case["template"])
    replies = [probe.encode_response(text) for text in texts]
    engine = make_engine(case, replies)
    started, cpu = time.perf_counter(), time.process_time()
    trajectories = asyncio.run(engine.run(rows))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finished = sum(t.finish_reason == "declared_call" for t in trajectories)
    assert finished == len(rows), f"{finished} of {len(rows)} chains ended on their call"
    for trajectory in trajectories[:: max(1, len(rows) // 20)]:
        trajectory.check()
    return {"seconds": seconds, "cpu_s": cpu}


def tokenize_new_text(case: dict, rows: list[dict]) -> dict:
    """CPU seconds to tokenize the tools' JSON of every row (text only the distinct sets
    have), uncached: by the engine's own encoder (a fresh one) and by the Rust tokenizer's
    ``encode`` (the reference)."""
    chat = ChatTemplate.load(case["tokenizer"], case["template"])
    engine_sets = make_engine(case).task_tools
    texts = ["\n".join(json.dumps(s) for s in engine_sets.for_task(r).schemas) for r in rows]
    backend = getattr(chat.tokenizer, "backend_tokenizer", None)
    encode = (
        (lambda t: backend.encode(t, add_special_tokens=False))
        if backend is not None
        else (lambda t: chat.tokenizer(t, add_special_tokens=False))
    )
    started = time.process_time()
    for text in texts:
        encode(text)
    rust = time.process_time() - started
    fresh = ChatTemplate.load(case["tokenizer"], case["template"])
    started = time.process_time()
    for text in texts:
        fresh.encode_text(text)
    return {"engine": time.process_time() - started, "rust": rust}


def measure(case: dict, rows: list[dict], repeats: int) -> dict:
    distinct, shared = rows, shared_rows(rows)
    texts = {
        "distinct": [call_text(r, case["parser"], i) for i, r in enumerate(distinct)],
        "shared": [call_text(r, case["parser"], i) for i, r in enumerate(shared)],
    }
    texts["distinct_warm"] = texts["distinct"]
    runs: dict = {name: {"render_parse": [], "engine_run": []} for name in texts}
    for _ in range(repeats):  # alternate, so that drift on a shared machine hits both
        for name, those in (
            ("distinct", distinct),
            ("shared", shared),
            ("distinct_warm", distinct),
        ):
            warm = name == "distinct_warm"
            runs[name]["render_parse"].append(render_parse(case, those, texts[name], warm))
        for name, those in (("shared", shared), ("distinct", distinct)):
            runs[name]["engine_run"].append(engine_run(case, those, texts[name]))
    out: dict = {"case": case["name"], "rows": len(rows), "repeats": repeats}
    for name in texts:
        out[name] = {}
        for kind, results in runs[name].items():
            if not results:
                continue
            middle = sorted(results, key=lambda r: r["seconds"])[len(results) // 2]
            out[name][kind] = {k: round(v, 4) for k, v in middle.items()}
            out[name][kind]["per_row_us"] = round(middle["seconds"] / len(rows) * 1e6, 1)
            out[name][kind]["all_s"] = [round(r["seconds"], 4) for r in results]
            out[name][kind]["cpu_s"] = round(statistics.median(r["cpu_s"] for r in results), 4)
            out[name][kind]["min_cpu_s"] = round(min(r["cpu_s"] for r in results), 4)
            if "warm_cpu_s" in middle:
                out[name][kind]["warm_min_cpu_s"] = round(min(r["warm_cpu_s"] for r in results), 4)
                total = min(r["cpu_s"] + r["warm_cpu_s"] for r in results)
                out[name][kind]["with_warm_min_cpu_s"] = round(total, 4)
    for kind in ("render_parse", "engine_run"):
        for clock, suffix in (("seconds", ""), ("cpu_s", "_cpu"), ("min_cpu_s", "_min_cpu")):
            ratio = out["distinct"][kind][clock] / out["shared"][kind][clock]
            out[f"ratio_{kind}{suffix}"] = round(ratio, 3)
    shared_min = out["shared"]["render_parse"]["min_cpu_s"]
    warmed = out["distinct_warm"]["render_parse"]
    # the rollout path after warm_first_prompts, and the same with the warm-up counted
    out["ratio_render_parse_min_cpu_warmed"] = round(warmed["min_cpu_s"] / shared_min, 3)
    out["ratio_render_parse_min_cpu_with_warm_up"] = round(
        warmed["with_warm_min_cpu_s"] / shared_min, 3
    )
    measured = [tokenize_new_text(case, rows) for _ in range(repeats)]
    new_text = min(m["engine"] for m in measured)
    out["tokenize_new_text_cpu_s"] = round(new_text, 4)
    out["tokenize_new_text_rust_encode_cpu_s"] = round(min(m["rust"] for m in measured), 4)
    beyond = out["distinct"]["render_parse"]["min_cpu_s"] - new_text
    out["ratio_render_parse_min_cpu_beyond_new_text"] = round(
        beyond / out["shared"]["render_parse"]["min_cpu_s"], 3
    )
    out["target_ratio"] = 1.2
    return out


def cases(realdata: Path | None, tiny: Path) -> list[dict]:
    found = []
    if realdata is not None and (realdata / "qwen2.5" / "tokenizer.json").is_file():
        folder = realdata / "qwen2.5"
        template = str(folder / "chat_template.jinja")
        found.append(
            {"name": "qwen2.5 + hermes", "tokenizer": str(folder), "template": template,
             "parser": "hermes"}
        )  # fmt: skip
    if realdata is not None and (realdata / "qwen3" / "tokenizer.json").is_file():
        found.append({"name": "qwen3 + qwen3_coder (typed by schema)",
                      "tokenizer": str(realdata / "qwen3"), "template": "qwen3_coder",
                      "parser": "qwen3_coder"})  # fmt: skip
    if realdata is not None and (realdata / "smollm2" / "tokenizer.json").is_file():
        found.append({"name": "smollm2 + pythonic (the bfcl recipe's)",
                      "tokenizer": str(realdata / "smollm2"), "template": "pythonic",
                      "parser": "pythonic"})  # fmt: skip
    if not found:
        found.append({"name": "tiny chatml-tools + hermes", "tokenizer": str(tiny),
                      "template": None, "parser": "hermes"})  # fmt: skip
    return found


def find_realdata(given: str | None) -> Path | None:
    for candidate in ([Path(given)] if given else []) + [
        REPO.parent / "shared" / "realdata",
        REPO / "build" / "realdata",
    ]:
        if candidate.is_dir():
            return candidate
    return None


def main(argv: list[str] | None = None) -> dict:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--rows", type=int, default=1000)
    options.add_argument("--repeats", type=int, default=3, help="runs per measure (median)")
    options.add_argument("--realdata", help="folder of the real tokenizers (default: found)")
    options.add_argument("--tiny", action="store_true", help="only the tiny model's template")
    options.add_argument("--out", help="also write the JSON here")
    args = options.parse_args(argv)
    rows = make_rows(args.rows)
    report: dict = {
        "benchmark": "task_tools_bench",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "results": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        tiny = Path(folder) / "tiny"
        if args.tiny:
            from agentfly_cli.models.tiny import build_tiny_model

            build_tiny_model(tiny)
        realdata = None if args.tiny else find_realdata(args.realdata)
        if realdata is None and not tiny.exists():
            from agentfly_cli.models.tiny import build_tiny_model

            build_tiny_model(tiny)
        for case in cases(realdata, tiny):
            report["results"].append(measure(case, rows, args.repeats))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return report


if __name__ == "__main__":
    main()
