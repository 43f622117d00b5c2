"""Pure scoring functions used by the built-in rewards.

Plain functions without decorators or project imports. ``math_verify`` (which pulls in
sympy) is imported lazily inside :func:`math_equal_score` so that importing this module
stays cheap.
"""

from __future__ import annotations

import logging
import re
import string
from collections import Counter
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)
# A gold answer containing one of these is already delimited LaTeX and is parsed as is.
_LATEX_DELIMS = ("$", "\\boxed", "\\(", "\\[")


def _as_list(gold: Any) -> list[Any]:
    """Return ``gold`` as a list of candidate answers (``None`` entries dropped)."""
    items = list(gold) if isinstance(gold, (list, tuple)) else [gold]
    return [g for g in items if g is not None]


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, strip punctuation, drop articles, collapse spaces."""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, gold: Any) -> float:
    """1.0 if ``prediction`` equals any gold exactly (case-sensitive; only surrounding
    whitespace is ignored), else 0.0. Non-string golds are compared via ``str(g)``."""
    pred = str(prediction).strip()
    return 1.0 if any(pred == str(g).strip() for g in _as_list(gold)) else 0.0


def qa_em_score(prediction: str, gold: Any) -> float:
    """1.0 if the SQuAD-normalized prediction equals any normalized gold, else 0.0."""
    pred = normalize_answer(prediction)
    return 1.0 if any(pred == normalize_answer(g) for g in _as_list(gold)) else 0.0


def _f1_single(pred_tokens: list[str], gold_tokens: list[str]) -> dict[str, float]:
    """Token-level F1/precision/recall between two token lists (SQuAD definition)."""
    if not pred_tokens or not gold_tokens:
        same = float(pred_tokens == gold_tokens)  # 1.0 only when both are empty
        return {"f1": same, "precision": same, "recall": same}
    num_same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if num_same == 0:
        return {"f1": 0.0, "precision": 0.0, "recall": 0.0}
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    f1 = 2 * precision * recall / (precision + recall)
    return {"f1": f1, "precision": precision, "recall": recall}


def qa_f1_score(prediction: str, gold: Any) -> dict[str, float]:
    """SQuAD token-level F1 over normalized tokens, taking the best gold.

    Returns ``{"f1", "precision", "recall"}`` of the gold with the highest F1 (first one
    on ties). An empty prediction scores 1.0 only against an empty gold; with no golds at
    all every value is 0.0.
    """
    pred_tokens = normalize_answer(prediction).split()
    best = {"f1": 0.0, "precision": 0.0, "recall": 0.0}
    for g in _as_list(gold):
        scores = _f1_single(pred_tokens, normalize_answer(g).split())
        if scores["f1"] > best["f1"]:
            best = scores
    return best


# Prose has words of two or more letters; LaTeX commands (\\pi, \\frac) and variables do not count.
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")


def _parse_prediction(prediction: str, parse: Any) -> list[Any]:
    """Parse a model's answer: bare math (``2\\pi``, ``2x+1``) as a whole expression, prose
    ("The answer is 42") with math-verify's own extraction.

    Without this, math-verify reads the bare ``2\\pi`` as just ``2``, a false match for gold 2.
    """
    text = str(prediction).strip()
    if not text:
        return []
    if not any(d in text for d in _LATEX_DELIMS) and not _WORD.search(text):
        parsed = parse(f"${text}$", parsing_timeout=None)
        if parsed:
            return parsed
    return parse(text, parsing_timeout=None)


def _parse_gold(gold: Any, parse: Any) -> list[Any]:
    """Parse one gold answer with math-verify.

    A bare gold (no ``$``/``\\boxed``/``\\(``/``\\[``) is wrapped in ``$...$`` first, so
    that e.g. ``"x^2+1"``, ``"\\sqrt{2}"`` or ``"2\\pi"`` parse as whole expressions
    (unwrapped, math-verify would only pick a plain number out of them, or nothing).
    Falls back to parsing the raw text if the wrapped form yields nothing.
    """
    text = str(gold).strip()
    if not text:
        return []
    if not any(d in text for d in _LATEX_DELIMS):
        parsed = parse(f"${text}$", parsing_timeout=None)
        if parsed:
            return parsed
    return parse(text, parsing_timeout=None)


def math_equal_score(prediction: str, gold: Any) -> float:
    """1.0 if math-verify judges ``prediction`` equivalent to any gold, else 0.0.

    The prediction is parsed as free text with math-verify's default extraction: it takes
    a ``\\boxed{}`` answer or a ``$...$`` expression when present, otherwise a number from
    the text ("The answer is 42" -> 42, "x = 3" -> 3, "1,000" -> 1000); text with no math
    in it ("???", "", "hello") parses to nothing and scores 0.0, as do any errors.

    Timeouts are disabled (``parsing_timeout=None``, ``timeout_seconds=None``) because
    math-verify's timeouts use ``signal.alarm``, which only works in the main thread; this
    makes the function thread-safe to call, but callers must bound its run time themselves.
    """
    from math_verify import parse, verify  # lazy: pulls in sympy

    # math-verify warns on every call that its own timeout is off; the reward enforces one.
    for module in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(module).setLevel(logging.ERROR)

    try:
        pred_parsed = _parse_prediction(prediction, parse)
        if not pred_parsed:
            return 0.0
        for g in _as_list(gold):
            gold_parsed = _parse_gold(g, parse)
            if gold_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=None):
                return 1.0
    except Exception:
        return 0.0
    return 0.0
