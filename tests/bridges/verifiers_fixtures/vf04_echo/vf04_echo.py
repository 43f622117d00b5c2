"""A verifiers 0.4 (Taskset/Harness) test taskset: say the word; the task's reward is exact
match of the model's last reply, and it records the reply's length as a metric."""

import verifiers.v1 as vf

WORDS = ("apple", "pear", "plum", "fig")


class EchoData(vf.TaskData):
    answer: str


class EchoTask(vf.Task[EchoData]):
    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply.strip() == self.data.answer else 0.0

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply.strip()))


class EchoTaskset(vf.Taskset[EchoTask, vf.TasksetConfig]):
    def load(self):
        return [EchoTask(EchoData(prompt=f"Say {w}.", answer=w), self.config.task) for w in WORDS]


__all__ = ["EchoTaskset"]
