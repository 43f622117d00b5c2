"""``benchmarks/task_tools_bench.py`` at a small size: its JSON, both tool-set layouts through
the engine, every call passing its row's schema."""

from __future__ import annotations

import json

from tests.helpers.paths import load_script


def test_the_benchmark_reports_both_layouts_and_their_ratio(tmp_path):
    bench = load_script("benchmarks/task_tools_bench.py")
    out = tmp_path / "task_tools.json"
    report = bench.main(["--rows", "12", "--repeats", "1", "--tiny", "--out", str(out)])
    assert json.loads(out.read_text()) == report
    [result] = report["results"]
    assert result["case"] == "tiny chatml-tools + hermes" and result["rows"] == 12
    for layout in ("distinct", "shared"):
        for measure in ("render_parse", "engine_run"):
            assert result[layout][measure]["seconds"] > 0
    assert result["ratio_render_parse"] == round(
        result["distinct"]["render_parse"]["seconds"] / result["shared"]["render_parse"]["seconds"],
        3,
    )
    assert result["target_ratio"] == 1.2 and result["tokenize_new_text_cpu_s"] >= 0
    assert result["distinct"]["render_parse"]["cpu_s"] > 0 and "ratio_engine_run_cpu" in result


def test_rows_have_distinct_tool_sets_of_two_to_four_functions():
    bench = load_script("benchmarks/task_tools_bench.py")
    rows = bench.make_rows(200)
    sets = [json.dumps(row["function"], sort_keys=True) for row in rows]
    assert len(set(sets)) == 200
    assert {len(row["function"]) for row in rows} == {2, 3, 4}
    shared = bench.shared_rows(rows)
    assert all(row["function"] is shared[0]["function"] for row in shared)
