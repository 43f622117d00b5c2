"""A verifiers 0.4 test taskset whose task setup raises on every row but the first: the env's
episode fails on those rows before the harness runs."""

import verifiers.v1 as vf

WORDS = ("apple", "pear", "plum", "fig")


class FlakyData(vf.TaskData):
    answer: str


class FlakyTask(vf.Task[FlakyData]):
    async def setup(self, trace, runtime):
        if self.data.answer != "apple":
            raise RuntimeError(f"the taskset broke on {self.data.answer}")

    @vf.reward
    async def exact(self, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply.strip() == self.data.answer else 0.0


class FlakyTaskset(vf.Taskset[FlakyTask, vf.TasksetConfig]):
    def load(self):
        return [FlakyTask(FlakyData(prompt=f"Say {w}.", answer=w), self.config.task) for w in WORDS]


__all__ = ["FlakyTaskset"]
