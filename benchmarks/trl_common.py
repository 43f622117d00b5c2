"""What both of train_bench.py's TRL sides share: the GRPOConfig settings that make TRL's loop
match agentfly's (CPU, fp32, AdamW at a constant rate, no KL, token-mean loss, clip 0.2, grad
clip 1.0, no logging or saving) and a callback that times each optimizer step."""

from __future__ import annotations

import time

#: GRPOConfig keywords both cases pass; each adds its own sizes, rate and checkpointing.
SHARED_GRPO_SETTINGS = {
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "optim": "adamw_torch",
    "beta": 0.0,
    "loss_type": "dapo",
    "epsilon": 0.2,
    "temperature": 1.0,
    "use_cpu": True,
    "bf16": False,
    "report_to": "none",
    "disable_tqdm": True,
    "logging_steps": 1,
    "save_strategy": "no",
    "shuffle_dataset": False,
    "max_grad_norm": 1.0,
    "seed": 0,
}


def step_timer(seconds: list[float]):
    """A TrainerCallback appending each training step's wall seconds to ``seconds``."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.started = time.perf_counter()

        def on_step_end(self, *a, **k):
            seconds.append(time.perf_counter() - self.started)

    return StepTimer()
