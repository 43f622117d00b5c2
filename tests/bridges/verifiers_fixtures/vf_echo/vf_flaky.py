"""A verifiers (classic API) test environment whose rollout raises on every row but the first:
a two-turn MultiTurnEnv whose env_response breaks after the model's first reply."""

import verifiers as vf
from datasets import Dataset


class Flaky(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        if state["answer"] != "apple":
            raise RuntimeError(f"the env broke on {state['answer']}")
        return [{"role": "user", "content": "Once more."}]


def load_environment(**kwargs):
    rows = [{"question": f"Say {w}.", "answer": w} for w in ("apple", "pear", "plum", "fig")]

    def exact(completion, answer, **_):
        said = [m["content"] for m in completion if m["role"] == "assistant"]
        return 1.0 if said and said[-1].strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[exact])
    return Flaky(dataset=Dataset.from_list(rows), rubric=rubric, max_turns=2)
