"""Task data: JSONL, JSON, Parquet and datasets folders; rows become opening messages."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.tasks import field_choices, load_tasks, opening_messages, select_rows

ROWS = [
    {"question": "What is 2 + 3?", "answer": "5"},
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 4 * 4?"},
        ],
        "answer": "16",
    },
]


def test_jsonl_json_parquet_and_datasets_folder_load_the_same_rows(tmp_path):
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS) + "\n")
    as_json = tmp_path / "t.json"
    as_json.write_text(json.dumps({"data": ROWS}))
    flat = [{"question": "What is 2 + 3?", "answer": "5"}, {"question": "2+2", "answer": "4"}]
    datasets = pytest.importorskip("datasets", reason="datasets is a dev dependency")
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(flat), parquet)
    folder = tmp_path / "ds"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(flat)}).save_to_disk(str(folder))
    assert load_tasks(jsonl) == ROWS
    assert load_tasks(as_json) == ROWS
    assert load_tasks(parquet) == flat
    assert load_tasks(folder) == flat
    assert load_tasks(jsonl, limit=1) == ROWS[:1]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "x"}\n', "needs a 'question' field"),
        ("[1, 2]\n", "expected a JSON object"),
        ('{"question": 3}\n', "'question' must be a string"),
        ('{"messages": []}\n', "non-empty list"),
        ('{"messages": [{"role": "robot", "content": "x"}]}\n', "needs a role"),
        ("{oops\n", "t.jsonl:1: not JSON"),
        ("\n", "has no rows"),
    ],
)
def test_bad_rows_are_one_clear_error(tmp_path, content, message):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(UserError) as error:
        load_tasks(path)
    assert message in str(error.value)


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_tasks(tmp_path / "none.jsonl")
    other = tmp_path / "t.csv"
    other.write_text("question\nx\n")
    with pytest.raises(UserError, match="unknown format"):
        load_tasks(other)


def test_opening_messages_order_and_system_prompt():
    examples = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
    messages = opening_messages(ROWS[0], "Solve: {question} ({missing})", examples)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == "Solve: What is 2 + 3? ({missing})"
    # a task with its own system message keeps it, and the recipe's is not added
    own = opening_messages(ROWS[1], "Recipe system prompt", examples)
    assert own[0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in own] == ["system", "user", "assistant", "user"]


KINDS = [
    {"question": "q0", "kind": "shopping", "level": 1},
    {"question": "q1", "kind": "series", "level": 2},
    {"question": "q2", "kind": "shopping", "level": 2},
    {"question": "q3", "kind": "change", "level": "2"},
    {"question": "q4"},
]


def questions(rows):
    return [row["question"] for row in rows]


def test_where_keeps_matching_rows_before_limit(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in KINDS))
    assert questions(load_tasks(path, where={"kind": "shopping"})) == ["q0", "q2"]
    assert questions(load_tasks(path, where={"kind": ["series", "change"]})) == ["q1", "q3"]
    # fields combine with AND; a number matches its string form and back
    assert questions(load_tasks(path, where={"kind": "shopping", "level": 2})) == ["q2"]
    assert questions(load_tasks(path, where={"level": "2"})) == ["q1", "q2", "q3"]
    # where first, then limit: the first matching row, not the first row
    assert questions(load_tasks(path, limit=1, where={"kind": "change"})) == ["q3"]
    assert load_tasks(path, where={}) == KINDS


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (
            {"knd": "shopping"},
            "data.where.knd: no row of the data has a field 'knd'; "
            "its fields: question, kind, level",
        ),
        (
            {"kind": "shoping"},
            "data.where.kind=shoping keeps none of 4 rows of the data; "
            "its values: change, series, shopping",
        ),
        ({"kind": "shopping", "level": 3}, "data.where.level=3 keeps none of 2 rows"),
        ({"kind": []}, "data.where.kind: an empty list keeps no rows"),
    ],
)
def test_where_that_keeps_nothing_names_the_field_and_the_values(where, message):
    with pytest.raises(UserError) as error:
        select_rows(KINDS, where)
    assert message in str(error.value)


def test_field_choices_lists_the_fields_worth_selecting_on():
    rows = [*KINDS[:4], {"question": "q4", "kind": "series", "level": 1}]
    # kind: 3 values; level: 1, 2 and "2" shown as text; question: one value per row
    assert field_choices(rows) == {
        "kind": {"change": 1, "series": 2, "shopping": 2},
        "level": {"1": 2, "2": 3},
    }
    assert "kind" not in field_choices(KINDS)  # a row without the field: not selectable by all
    assert field_choices(rows, max_values=2) == {"level": {"1": 2, "2": 3}}
    assert field_choices([]) == {}


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("t.jsonl", b'{"question": "x"}\n\x00\x00', "t.jsonl:2: holds NUL bytes"),
        ("t.jsonl", '{"question": "é"}\n'.encode("latin-1"), "t.jsonl:1: byte 0xe9 at offset"),
        ("t.jsonl", ('{"question": "x", "y": ' + _nested(100_000) + "}").encode(), "too deeply"),
        ("t.json", _nested(100_000).encode(), "t.json: JSON nested too deeply"),
        ("t.jsonl", ('{"question": "x", "y": ' + _nested(150) + "}").encode(), "more than 100"),
        ("t.parquet", b"PAR1", "not a readable Parquet file"),
    ],
)
def test_unreadable_files_are_one_clear_error(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError) as error:
        load_tasks(path)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_folder_must_be_a_saved_dataset(tmp_path):
    (tmp_path / "rows.txt").write_text("x")
    with pytest.raises(UserError, match="not one saved with datasets' save_to_disk"):
        load_tasks(tmp_path)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"question": "x"}\n')
    assert load_tasks(path) == [{"question": "x"}]
    as_json = tmp_path / "t.json"
    as_json.write_bytes(b'\xef\xbb\xbf[{"question": "x"}]')
    assert load_tasks(as_json) == [{"question": "x"}]
