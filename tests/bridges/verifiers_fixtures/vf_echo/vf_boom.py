"""A verifiers (classic API) test environment whose rubric raises on every row but the first."""

import verifiers as vf
from datasets import Dataset


def load_environment(**kwargs):
    rows = [{"question": f"Say {w}.", "answer": w} for w in ("apple", "pear", "plum", "fig")]

    def exact(completion, answer, **_):
        if answer != "apple":
            raise RuntimeError("boom")
        return 1.0 if completion[-1]["content"].strip() == answer else 0.0

    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[exact]))
