"""Chunked, shared-prefix logprobs equal the naive full-logits way, and masked tokens get
exactly zero gradient."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentfly_cli.algorithms import losses
from agentfly_cli.algorithms.advantages import grpo_advantages
from agentfly_cli.algorithms.interfaces import AdvantageInput
from agentfly_cli.settings.algorithm import AlgorithmSettings
from agentfly_cli.train.tensors.batch import (
    TrainRow,
    plan_micro_batches,
    scatter_rows,
    shared_prefix_length,
    trained_mask,
)
from agentfly_cli.train.tensors.logprobs import naive_sequence_logprobs, sequence_logprobs


@pytest.fixture(scope="module")
def model(tiny_model):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)


def make_rows(
    groups: int = 2, per_group: int = 3, seed: int = 0, extra=(0, 0, 0)
) -> list[TrainRow]:
    """Multi-turn rows: prompt (mask 0), sampled turn (1), observation (0), sampled turn (1).
    Group ``g``'s prompt is 25 + ``extra[g]`` tokens long."""
    rng = random.Random(seed)
    prompt = [rng.randrange(200) for _ in range(24 + max(extra))]
    rows = []
    for g in range(groups):
        head = prompt[: 24 + extra[g]] + [g + 5]
        for _ in range(per_group):
            first = [rng.randrange(200) for _ in range(rng.randint(2, 7))]
            observation = [rng.randrange(200) for _ in range(4)]
            second = [rng.randrange(200) for _ in range(rng.randint(1, 3))]
            ids = head + first + observation + second
            mask = [0] * len(head) + [1] * len(first) + [0] * 4 + [1] * len(second)
            rows.append(TrainRow(ids, mask, f"g{g}"))
    return rows


def batch_logprobs(model, rows, *, share, max_tokens=10**6, chunk=4, plain_grads_on=False):
    """Per-row trained-token logprobs [B, L] through the micro-batch planner."""
    width = trained_mask(rows).shape[1]
    out = torch.zeros(len(rows), width)
    result = [None] * len(rows)
    plans = plan_micro_batches(rows, range(len(rows)), max_tokens=max_tokens, share_prefix=share)
    for plan in plans:
        stats = sequence_logprobs(
            model, plan.batch, chunk_size=chunk, entropy=True, plain_grads=plain_grads_on
        )
        matrix = scatter_rows(stats.logprobs, [rows[i] for i in plan.rows], width)
        for k, i in enumerate(plan.rows):
            result[i] = matrix[k]
    out = torch.stack(result)
    return out, plans


def naive_matrix(model, rows):
    width = trained_mask(rows).shape[1]
    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        ids = torch.tensor([row.ids])
        logp = naive_sequence_logprobs(model, ids, torch.ones_like(ids))[0]
        trained = torch.tensor(row.loss_mask[1:]).bool()
        out[i, : int(trained.sum())] = logp[trained]
    return out


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("max_tokens", [10**6, 20])
def test_chunked_logprobs_equal_naive(model, share, max_tokens):
    rows = make_rows()
    expected = naive_matrix(model, rows)
    with torch.no_grad():
        got, plans = batch_logprobs(model, rows, share=share, max_tokens=max_tokens)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    prefixes = {int(p.batch.prefix_ids.shape[1]) for p in plans}
    assert prefixes == ({24} if share else {0})  # all but the predicting token
    if max_tokens == 20:
        assert len(plans) > 2  # the budget split the groups


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_logprobs_and_entropy_at_a_temperature_are_of_the_divided_logits(model, share, temperature):
    """What the trainer computes for rollouts sampled at ``temperature`` (verl divides the
    logits likewise); chunks, shared prefixes and the checkpointed backward keep it exact."""
    rows = make_rows()
    want_logprobs, want_entropy = [], []
    for row in rows:
        ids = torch.tensor([row.ids])
        with torch.no_grad():
            logits = model(ids).logits[0, :-1].float() / temperature
        trained = torch.tensor(row.loss_mask[1:]).bool()
        logp = logits.log_softmax(-1)
        want_logprobs.append(logp.gather(1, ids[0, 1:, None])[:, 0][trained])
        want_entropy.append(-(logp.exp() * logp).sum(-1)[trained])
    plans = plan_micro_batches(rows, range(len(rows)), max_tokens=10**6, share_prefix=share)
    got_logprobs, got_entropy = [None] * len(rows), [None] * len(rows)
    for plan in plans:
        stats = sequence_logprobs(
            model, plan.batch, chunk_size=4, entropy=True, temperature=temperature
        )
        sizes = [sum(rows[i].loss_mask[1:]) for i in plan.rows]
        for i, lp, ent in zip(
            plan.rows, stats.logprobs.split(sizes), stats.entropy.split(sizes), strict=True
        ):
            got_logprobs[i], got_entropy[i] = lp, ent
    torch.testing.assert_close(torch.cat(got_logprobs), torch.cat(want_logprobs), atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat(got_entropy), torch.cat(want_entropy), atol=1e-5, rtol=0)


def test_a_temperature_must_be_positive(model):
    rows = make_rows(groups=1, per_group=1)
    [plan] = plan_micro_batches(rows, [0], max_tokens=10**6, share_prefix=False)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sequence_logprobs(model, plan.batch, temperature=0.0)


def test_groups_of_different_prompt_lengths_share_one_pass(model):
    """Left-padded prefixes of several lengths, and a group too short to share, in one plan."""
    rows = make_rows(groups=3, extra=(0, 9, 0))
    rows += [TrainRow([7, 8, 9, 10, 11], [0, 0, 1, 1, 1], "short")] * 2
    expected = naive_matrix(model, rows)
    with torch.no_grad():
        got, plans = batch_logprobs(model, rows, share=True)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    shared = [p for p in plans if p.batch.prefix_ids.shape[1]]
    assert len(shared) == 1 and shared[0].batch.prefix_ids.shape == (3, 33)
    assert shared[0].batch.repeats.tolist() == [3, 3, 3]
    assert sorted(i for p in plans for i in p.rows) == list(range(len(rows)))


def test_shared_prefix_gives_the_same_gradient(model):
    rows = make_rows(groups=3, extra=(0, 9, 0))

    def grads(share: bool) -> torch.Tensor:
        model.zero_grad()
        logprobs, _ = batch_logprobs(model, rows, share=share, max_tokens=20)
        (logprobs * trained_mask(rows)).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    plain, shared = grads(False), grads(True)
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-4)
    assert plain.abs().max() > 0


@pytest.mark.parametrize("plain_grads_on", [False, True])
@pytest.mark.parametrize("max_tokens", [20, 10**6])  # one row per prefix; groups of 3 rows
def test_shared_prefix_under_gradient_checkpointing_gives_the_same_logprobs_and_gradient(
    tiny_model, max_tokens, plain_grads_on
):
    """Checkpointing replays every decoder layer in backward: the shared prefix's KV must be
    neither dropped (transformers' default) nor appended twice by the replay."""
    rows = make_rows(groups=3, extra=(0, 9, 0))

    def run(checkpointing: bool, share: bool, separate: bool):
        torch.manual_seed(0)
        net = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        if checkpointing:
            net.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        net.train()
        calls = []
        net.model.layers[0].self_attn.register_forward_pre_hook(lambda *_: calls.append(1))
        logprobs, plans = batch_logprobs(
            net, rows, share=share, max_tokens=max_tokens, plain_grads_on=separate
        )
        (logprobs * trained_mask(rows)).sum().backward()
        grads = torch.cat([p.grad.flatten() for p in net.parameters()])
        return logprobs.detach(), grads, len(calls), plans

    plain_logprobs, plain_grads, _, _ = run(checkpointing=False, share=False, separate=False)
    logprobs, grads, calls, plans = run(checkpointing=True, share=True, separate=plain_grads_on)
    passes = sum(2 if p.batch.prefix_ids.shape[1] else 1 for p in plans)
    assert any(p.batch.prefix_ids.shape[1] for p in plans)
    assert max(p.batch.repeats.max() for p in plans) == (1 if max_tokens == 20 else 3)
    torch.testing.assert_close(logprobs, plain_logprobs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grads, plain_grads, atol=1e-5, rtol=1e-4)
    assert calls == 2 * passes  # every pass, prefix passes included, was replayed once
    assert plain_grads.abs().max() > 0


@pytest.mark.parametrize("plain_grads_on", [False, True])
def test_plain_grads_accumulate_before_the_prefix_backward(tiny_model, plain_grads_on):
    """Autograd holds a weight's gradient until all its uses are done: the continuations' share
    of the first layers' gradients waited for the prefix pass's backward (a second copy of the
    gradients). On aliases, every layer's weights have their gradient before the continuations'
    backward is through."""
    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    rows = make_rows(groups=1)
    (plan,) = plan_micro_batches(rows, range(len(rows)), max_tokens=10**6, share_prefix=True)
    assert plan.batch.prefix_ids.shape[1]
    events = []
    weights = [layer.mlp.down_proj.weight for layer in net.model.layers]
    for i, weight in enumerate(weights):
        weight.register_post_accumulate_grad_hook(lambda _, i=i: events.append(f"layer {i}"))

    def on_first_layer(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        if hidden.shape[0] == len(rows) and hidden.requires_grad:  # the continuations' pass
            hidden.register_hook(lambda grad: events.append("continuations done"))

    net.model.layers[0].register_forward_pre_hook(on_first_layer, with_kwargs=True)
    stats = sequence_logprobs(net, plan.batch, plain_grads=plain_grads_on)
    stats.logprobs.sum().backward()
    assert all(w.grad is not None and w.grad.abs().max() > 0 for w in weights)
    assert sorted(events) == sorted(
        [f"layer {i}" for i in range(len(weights))] + ["continuations done"]
    )
    layers_first = events[-1] == "continuations done"
    assert layers_first == plain_grads_on, events


def test_the_gradient_at_a_temperature_equals_the_naive_one(model):
    """Chunked, checkpointed and in place (the logits are divided in place) at T = 0.7."""
    rows = make_rows()

    def grads(chunked: bool) -> torch.Tensor:
        model.zero_grad()
        if chunked:
            plans = plan_micro_batches(rows, range(len(rows)), max_tokens=20, share_prefix=True)
            total = sum(
                sequence_logprobs(model, plan.batch, chunk_size=4, temperature=0.7).logprobs.sum()
                for plan in plans
            )
        else:
            total = 0.0
            for row in rows:
                ids = torch.tensor([row.ids])
                logits = model(ids).logits[0, :-1].float() / 0.7
                picked = logits.log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0]
                total = total + picked[torch.tensor(row.loss_mask[1:]).bool()].sum()
        total.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    naive, chunked = grads(False), grads(True)
    torch.testing.assert_close(chunked, naive, atol=1e-5, rtol=1e-4)
    assert naive.abs().max() > 0


def test_shared_prefix_stops_before_the_first_trained_token():
    rows = make_rows(groups=1)
    assert shared_prefix_length(rows) == 24  # the prompt minus the token that predicts
    short = [TrainRow([1, 2, 3, 4], [0, 0, 1, 1], "g")] * 2
    assert shared_prefix_length(short) == 0  # too short to be worth a separate pass


def test_the_output_head_only_sees_trained_positions(model):
    """The head runs on exactly the positions that predict trained tokens, so prompt and
    observation positions never get logits at all."""
    rows = make_rows()
    seen: list[torch.Tensor] = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda module, args, output: seen.append(args[0].detach())
    )
    try:
        with torch.no_grad():
            batch_logprobs(model, rows, share=True, chunk=1000)
    finally:
        hook.remove()
    assert sum(h.shape[0] for h in seen) == sum(r.num_trained for r in rows)


def test_masked_tokens_get_exactly_zero_gradient(model):
    """The full policy loss (PPO clip, KL k3, entropy bonus) computed from full logits: the
    gradient on every logit that predicts a prompt or observation token is exactly zero, and
    the gradient on the logits of sampled tokens is not."""
    rows = make_rows()
    config = AlgorithmSettings(kl_coef=0.1, entropy_coef=0.01)
    mask = trained_mask(rows)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])
    adv = grpo_advantages(AdvantageInput(rewards, mask, [r.group for r in rows]), config)
    logits_all, picked, entropies = [], [], []
    for row in rows:
        logits = model(torch.tensor([row.ids])).logits[0, :-1].float()
        logits.retain_grad()
        logits_all.append(logits)
        logp = torch.log_softmax(logits, -1)
        trained = torch.tensor(row.loss_mask[1:]).bool()
        targets = torch.tensor(row.ids[1:])
        picked.append(logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)[trained])
        entropies.append(losses.entropy_from_logits(logits)[trained])
    width = mask.shape[1]
    logprobs = scatter_rows(torch.cat(picked), rows, width)
    entropy = scatter_rows(torch.cat(entropies), rows, width)
    old = logprobs.detach() + 0.05 * torch.randn_like(logprobs)
    ref = logprobs.detach() - 0.1
    per_token, _ = losses.ppo_loss(logprobs, old, adv.advantages, mask, config)
    loss = losses.aggregate_loss(per_token, mask, "token-mean")
    loss = loss + config.kl_coef * losses.aggregate_loss(
        losses.kl_estimate(logprobs, ref, "k3"), mask, "token-mean"
    )
    loss = loss - config.entropy_coef * losses.aggregate_loss(entropy, mask, "token-mean")
    loss.backward()
    for row, logits in zip(rows, logits_all, strict=True):
        trained = torch.tensor(row.loss_mask[1:]).bool()
        assert torch.count_nonzero(logits.grad[~trained]) == 0
        assert (logits.grad[trained].abs().sum(-1) > 0).all()
