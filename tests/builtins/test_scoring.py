"""Tests for the pure scoring functions in rewards_builtin.scoring."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rewards_builtin.scoring import (
    exact_match_score,
    math_equal_score,
    normalize_answer,
    qa_em_score,
    qa_f1_score,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Cat", "cat"),
        ("  Hello,   World!  ", "hello world"),
        ("a an the", ""),
        ("An apple a day", "apple day"),
        ("theory anthem", "theory anthem"),  # articles only as whole words
        ("U.S.A.", "usa"),
        ("tab\tand\nnewline", "tab and newline"),
        ("", ""),
        ("The answer is: 42.", "answer is 42"),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [
        ("Paris", "Paris", 1.0),
        ("  Paris \n", "Paris", 1.0),
        ("Paris", "  Paris  ", 1.0),
        ("paris", "Paris", 0.0),  # case-sensitive
        ("Paris.", "Paris", 0.0),  # punctuation matters
        ("408", 408, 1.0),
        (" 408 ", 408, 1.0),
        ("408.0", 408, 0.0),
        ("0.5", 0.5, 1.0),
        ("b", ["a", "b", "c"], 1.0),
        ("d", ["a", "b", "c"], 0.0),
        ("7", ("x", 7), 1.0),
        ("x", [], 0.0),
        ("x", None, 0.0),
    ],
)
def test_exact_match_score(prediction, gold, expected):
    assert exact_match_score(prediction, gold) == expected


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [
        ("The Eiffel Tower!", "eiffel tower", 1.0),
        ("an apple", "Apple.", 1.0),
        ("  NEW   york ", "new york", 1.0),
        ("New York City", "new york", 0.0),
        ("1,000", "1000", 1.0),
        ("Paris", ["London", "the paris"], 1.0),
        ("Rome", ["London", "Paris"], 0.0),
        ("42", 42, 1.0),
    ],
)
def test_qa_em_score(prediction, gold, expected):
    assert qa_em_score(prediction, gold) == expected


@pytest.mark.parametrize(
    "prediction, gold, f1, precision, recall",
    [
        # pred tokens: cat sat on mat (4); gold tokens: cat on mat (3); overlap 3
        # P = 3/4, R = 3/3, F1 = 2 * 0.75 * 1 / 1.75 = 6/7
        ("the cat sat on the mat", "a cat on a mat", 6 / 7, 3 / 4, 1.0),
        # pred: cat cat (2); gold: cat dog (2); overlap counts multiplicity: 1
        ("cat cat", "cat dog", 0.5, 0.5, 0.5),
        # pred: new york (2); gold: new york city (3); P = 1, R = 2/3, F1 = 0.8
        ("New York", "new york city", 0.8, 1.0, 2 / 3),
        ("Paris", "London", 0.0, 0.0, 0.0),
        ("Paris", "Paris", 1.0, 1.0, 1.0),
        ("", "", 1.0, 1.0, 1.0),
        ("the", "a", 1.0, 1.0, 1.0),  # both normalize to empty
        ("", "Paris", 0.0, 0.0, 0.0),
        ("Paris", "", 0.0, 0.0, 0.0),
        ("Paris", [], 0.0, 0.0, 0.0),
    ],
)
def test_qa_f1_score(prediction, gold, f1, precision, recall):
    result = qa_f1_score(prediction, gold)
    assert set(result) == {"f1", "precision", "recall"}
    assert result["f1"] == pytest.approx(f1)
    assert result["precision"] == pytest.approx(precision)
    assert result["recall"] == pytest.approx(recall)


def test_qa_f1_score_takes_best_gold():
    # vs "cat": P = 1/4, R = 1, F1 = 0.4; vs "cat sat on mat": exact -> 1.0
    result = qa_f1_score("the cat sat on the mat", ["cat", "cat sat on mat", "dog"])
    assert result == pytest.approx({"f1": 1.0, "precision": 1.0, "recall": 1.0})
    # vs "black cat": P = 1/2, R = 1/2, F1 = 0.5; vs "cat": P = 1/2, R = 1, F1 = 2/3
    result = qa_f1_score("white cat", ["black cat", "cat"])
    assert result == pytest.approx({"f1": 2 / 3, "precision": 0.5, "recall": 1.0})


MATH_CASES = [
    # bare LaTeX and algebra in the prediction are whole expressions, not their first number
    ("2\\pi", 2, 0.0),
    ("2\\pi", "2\\pi", 1.0),
    ("2x+1", 2, 0.0),
    ("x^2+1", "x^2+1", 1.0),
    ("\\sqrt{2}", "\\sqrt{2}", 1.0),
    ("The answer is 2", 2, 1.0),
    ("\\frac{1}{2}", "0.5", 1.0),
    ("0.5", "\\frac{1}{2}", 1.0),
    ("1/2", "0.5", 1.0),
    ("The final answer is $\\boxed{\\frac{1}{2}}$", 0.5, 1.0),
    ("42", 42, 1.0),
    ("408", "408", 1.0),
    ("The answer is 42", 42, 1.0),
    ("So the answer is \\boxed{408}.", 408, 1.0),
    ("x = 3", 3, 1.0),
    ("$x = 3$", "3", 1.0),
    ("\\boxed{3}", "x=3", 1.0),
    ("1,000", 1000, 1.0),
    ("$\\sqrt{2}$", "\\sqrt{2}", 1.0),
    ("\\boxed{x^2+1}", "x^2+1", 1.0),
    ("43", 42, 0.0),
    ("\\boxed{43}", "42", 0.0),
    ("", 42, 0.0),
    ("???", 42, 0.0),
    ("no numbers here", "7", 0.0),
    ("42", "", 0.0),
    ("42", None, 0.0),
    ("42", [], 0.0),
    ("7", ["5", 6, "7"], 1.0),
    ("8", ["5", 6, "7"], 0.0),
]


@pytest.mark.parametrize("prediction, gold, expected", MATH_CASES)
def test_math_equal_score(prediction, gold, expected):
    assert math_equal_score(prediction, gold) == expected


def test_math_equal_score_in_worker_threads():
    # math-verify's default timeouts use signal.alarm, which fails outside the main thread.
    with ThreadPoolExecutor(max_workers=4) as pool:
        single = pool.submit(math_equal_score, "\\frac{1}{2}", "0.5").result()
        results = list(pool.map(lambda case: math_equal_score(case[0], case[1]), MATH_CASES))
    assert single == 1.0
    assert results == [expected for _, _, expected in MATH_CASES]


def test_module_import_is_light():
    code = (
        "import sys, rewards_builtin.scoring; "
        "heavy = [m for m in ('math_verify', 'sympy', 'torch') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
