"""A verifiers (classic API) test environment: say the answer; the rubric scores exact match."""

import verifiers as vf
from datasets import Dataset


def load_environment(**kwargs):
    rows = [{"question": f"Say {w}.", "answer": w} for w in ("apple", "pear", "plum", "fig")]

    def exact(completion, answer, **_):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        return 1.0 if text.strip() == answer else 0.0

    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[exact]))
