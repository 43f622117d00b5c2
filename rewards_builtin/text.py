"""Answer-checking rewards. Each compares the final answer with the dataset field ``answer``."""

from typing import Any

from agentfly_cli.components.rewards import reward
from rewards_builtin import scoring


@reward
def exact_match(prediction: str, answer: Any) -> float:
    """1.0 when the answer equals the gold answer exactly (surrounding whitespace ignored).

    ``answer`` may be a string, a number or a list of acceptable answers.
    """
    return scoring.exact_match_score(_text(prediction), answer)


@reward(timeout=30.0)
def math_equal(prediction: str, answer: Any) -> float:
    """1.0 when the answer is mathematically equal to the gold answer (math-verify)."""
    return scoring.math_equal_score(_text(prediction), answer)


@reward
def qa_em(prediction: str, answer: Any) -> float:
    """1.0 when the normalised answer (case, punctuation, articles) matches a gold answer."""
    return scoring.qa_em_score(_text(prediction), answer)


@reward
def qa_f1(prediction: str, answer: Any) -> dict:
    """Token-level F1 against the best gold answer; extras hold precision and recall."""
    scores = scoring.qa_f1_score(_text(prediction), answer)
    return {"reward": scores["f1"], "precision": scores["precision"], "recall": scores["recall"]}


def _text(prediction: Any) -> str:
    return "" if prediction is None else str(prediction)
