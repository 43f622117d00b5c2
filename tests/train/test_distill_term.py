"""On-policy distillation's per-token term, coef * (log p_teacher - log p_student) on every
trained token and 0 elsewhere, undiscounted: the function in float64 against a transcription,
and the update's own pass (multi-turn rows with observation gaps) against full forwards."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentfly_cli.algorithms.distill import distill_advantages
from agentfly_cli.algorithms.interfaces import get_advantage_estimator
from agentfly_cli.models.tiny import build_tiny_model
from agentfly_cli.recipes.loader import load_config
from agentfly_cli.settings.distill import DistillSettings
from agentfly_cli.train.update import PolicyUpdate
from agentfly_cli.trajectory import Trajectory


def transcribed(advantages, teacher, student, mask, coef, mode):
    """The term token by token, in Python floats: -coef * k1 where trained, else 0."""
    out, k1s, terms = [], [], []
    for i in range(len(mask)):
        row = []
        for t in range(len(mask[i])):
            term = 0.0
            if mask[i][t]:
                k1 = student[i][t] - teacher[i][t]
                term = -coef * k1
                k1s.append(k1)
                terms.append(term)
            row.append(term if mode == "only" else advantages[i][t] + term)
        out.append(row)
    return out, sum(k1s) / len(k1s), sum(terms) / len(terms)


@pytest.mark.parametrize("mode", ["add", "only"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_term_equals_a_transcription_in_float64(mode, seed):
    g = torch.Generator().manual_seed(seed)
    rows, width = 5, 13
    # uneven rows with gaps inside (observations) and padding after
    mask = (torch.rand(rows, width, generator=g, dtype=torch.float64) < 0.6).double()
    for i in range(rows):
        mask[i, width - 1 - i % 4 :] = 0.0
    mask[0, 3:6] = 0.0  # an observation between two turns
    mask[1, :] = 0.0  # a row with nothing trained
    teacher = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 8
    student = -torch.rand(rows, width, generator=g, dtype=torch.float64) * 8
    advantages = torch.randn(rows, width, generator=g, dtype=torch.float64) * mask
    coef = 0.7
    settings = DistillSettings(teacher="t", coef=coef, mode=mode)
    out, metrics = distill_advantages(advantages, teacher, student, mask, settings)
    want, kl, term = transcribed(
        advantages.tolist(), teacher.tolist(), student.tolist(), mask.tolist(), coef, mode
    )
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor(want, dtype=torch.float64), atol=1e-6, rtol=0)
    assert (out[mask == 0] == 0).all()  # exactly 0 off the trained tokens, padding included
    assert metrics["distill/reverse_kl"] == pytest.approx(kl, abs=1e-6)
    assert metrics["distill/term_mean"] == pytest.approx(term, abs=1e-6)
    assert metrics["distill/term_mean"] == pytest.approx(-coef * kl, abs=1e-9)


def test_a_teacher_equal_to_the_student_gives_exactly_zero():
    g = torch.Generator().manual_seed(5)
    student = -torch.rand(3, 7, generator=g) * 5
    mask = (torch.rand(3, 7, generator=g) < 0.7).float()
    advantages = torch.randn(3, 7, generator=g) * mask
    for mode in ("add", "only"):
        settings = DistillSettings(teacher="t", mode=mode)
        out, metrics = distill_advantages(advantages, student.clone(), student, mask, settings)
        assert torch.equal(out, advantages if mode == "add" else torch.zeros_like(mask))
        assert metrics == {"distill/reverse_kl": 0.0, "distill/term_mean": 0.0}


# ---- the update's own passes ---------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tiny_model, tmp_path_factory):
    """The student (the tiny model) and a teacher of the same shape and tokenizer with other
    weights (seed 1), both float64."""
    other = build_tiny_model(tmp_path_factory.mktemp("teacher"), seed=1)
    loaded = []
    for path in (tiny_model, other):
        net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64)
        net.config.use_cache = False
        loaded.append(net.eval().requires_grad_(False))
    return loaded


def multi_turn_chains(seed: int) -> list[Trajectory]:
    """Six chains of two groups: prompt, turn, observation, turn, of uneven lengths."""
    g = torch.Generator().manual_seed(seed)
    chains = []
    for i in range(6):
        t = Trajectory(group_id=f"g{i % 2}", reward=float(torch.rand(1, generator=g)))
        for part, length in enumerate(torch.randint(2, 9, (4,), generator=g).tolist()):
            ids = torch.randint(1, 400, (length,), generator=g).tolist()
            role = "assistant" if part % 2 else "user"
            t.append(role, ids, sampled=bool(part % 2), logprobs=[-1.0] * length)
        chains.append(t)
    return chains


def full_forward_logprobs(model, chain: Trajectory, temperature: float) -> list[float]:
    """The trained tokens' logprobs from one plain forward over the whole chain."""
    with torch.no_grad():
        logits = model(torch.tensor([chain.ids])).logits[0].double() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return [
        float(logp[t - 1, chain.ids[t]]) for t in range(1, len(chain.ids)) if chain.loss_mask[t]
    ]


def grpo(chains: list[Trajectory]) -> list[float]:
    """(r - group mean) / (unbiased group std + 1e-6), per chain."""
    out = []
    for chain in chains:
        group = [c.reward for c in chains if c.group_id == chain.group_id]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))
        out.append((chain.reward - mean) / (std + 1e-6))
    return out


def update_with(models, teacher, *sets: str) -> PolicyUpdate:
    student = models[0]
    config = load_config("calculator", list(sets), model="unused-model")
    train = SimpleNamespace(
        model=student,
        device=torch.device("cpu"),
        plain_grad_accumulation=False,
        world_size=1,
        unwrapped=lambda: student,
    )
    return PolicyUpdate(
        config,
        train,
        eot_token_id=0,
        reference=None,
        share_prefix=True,
        chunk=8,  # several output-head chunks per row
        temperature=0.7,
        advantage_fn=get_advantage_estimator("grpo"),
        policy_loss_fn=None,
        teacher=teacher,
    )


@pytest.mark.parametrize("mode", ["add", "only"])
def test_the_update_adds_the_term_after_grpo_on_multi_turn_rows(models, mode):
    student, teacher = models
    update = update_with(
        models, teacher, "trainer.distill.teacher=t", f"trainer.distill.mode={mode}",
        "trainer.distill.coef=0.5", "trainer.micro_batch_tokens=40",
    )  # fmt: skip
    assert update._needs_old_pass()  # one epoch, one mini-batch: only the term needs it
    chains = multi_turn_chains(3)
    metrics: dict[str, float] = {}
    batch = update.prepare(chains, metrics)
    advantages = grpo(chains)
    kls = []
    for i, chain in enumerate(chains):
        ours = full_forward_logprobs(student, chain, 0.7)
        theirs = full_forward_logprobs(teacher, chain, 0.7)
        task = advantages[i] if mode == "add" else 0.0
        want = [task + 0.5 * (b - a) for a, b in zip(ours, theirs, strict=True)]
        kls += [a - b for a, b in zip(ours, theirs, strict=True)]
        n = len(want)
        got = batch.advantages[i].double()
        # the batch holds float32 logprobs: a few float32 roundings of numbers up to ~10
        torch.testing.assert_close(
            got[:n], torch.tensor(want, dtype=torch.float64), atol=5e-6, rtol=0
        )
        assert (got[n:] == 0).all()  # padding
    assert abs(sum(kls) / len(kls)) > 1e-3  # the teacher differs: the check means something
    assert metrics["distill/reverse_kl"] == pytest.approx(sum(kls) / len(kls), abs=5e-6)
    assert metrics["distill/term_mean"] == pytest.approx(-0.5 * sum(kls) / len(kls), abs=5e-6)


def test_the_student_as_its_own_teacher_adds_exactly_nothing(models):
    student, _ = models
    chains = multi_turn_chains(4)
    plain = update_with(models, None).prepare(chains, {})
    metrics: dict[str, float] = {}
    distilled = update_with(models, student, "trainer.distill.teacher=t").prepare(chains, metrics)
    assert torch.equal(distilled.advantages, plain.advantages)
    assert metrics["distill/reverse_kl"] == 0.0 and metrics["distill/term_mean"] == 0.0
