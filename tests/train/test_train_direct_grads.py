"""The output head and the embedding add their weight gradients straight into ``.grad``
(``plain_grads``, the torch backend): the same gradients as autograd's, without a temporary as
large as the weight (SmolLM2's tied [49152, 576] matrix: 113 MB per temporary)."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM

from agentfly_cli.train.tensors.batch import TrainRow, plan_micro_batches
from agentfly_cli.train.tensors.direct_grads import direct_embedding, direct_head, embed, project
from agentfly_cli.train.tensors.logprobs import auto_chunk_size, sequence_logprobs, split_model


@pytest.fixture
def net(tiny_model):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def rows(seed: int) -> list[TrainRow]:
    """Two groups sharing prompts; token 0 (the tiny model's padding_idx) inside the rows."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for group in range(2):
        prompt = [0, 5] + torch.randint(1, 500, (20,), generator=g).tolist()
        for _ in range(3):
            turn = torch.randint(0, 500, (6,), generator=g).tolist() + [0]
            out.append(TrainRow(prompt + turn, [0] * len(prompt) + [1] * len(turn), f"g{group}"))
    return out


def accumulated_grads(model, plain_grads: bool) -> dict[str, torch.Tensor]:
    """Two micro-batches per call, two calls: gradients accumulate into existing ``.grad``."""
    model.zero_grad(set_to_none=True)
    for seed in (1, 2):
        data = rows(seed)
        for plan in plan_micro_batches(data, range(len(data)), max_tokens=60, share_prefix=True):
            stats = sequence_logprobs(
                model, plan.batch, chunk_size=4, entropy=True, plain_grads=plain_grads
            )
            (stats.logprobs.sum() - 0.1 * stats.entropy.sum()).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_the_gradients_equal_autograds(net):
    assert net.config.tie_word_embeddings and net.model.embed_tokens.padding_idx == 0
    want = accumulated_grads(net, plain_grads=False)
    got = accumulated_grads(net, plain_grads=True)
    assert want.keys() == got.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)
    embedding = want["model.embed_tokens.weight"]
    assert embedding.abs().max() > 0 and embedding[0].abs().max() > 0  # row 0: the head's share


def test_padding_rows_get_no_embedding_gradient(net):
    """As in ``nn.Embedding(padding_idx=0)``: the embedding adds nothing to row 0."""
    table = net.model.embed_tokens
    ids = torch.tensor([[0, 3, 0, 3, 7]])
    embed(table, ids).sum().backward()
    grad = table.weight.grad
    assert grad[0].abs().max() == 0
    torch.testing.assert_close(grad[3], torch.full_like(grad[3], 2.0))
    assert grad[7].eq(1).all() and grad[1].abs().max() == 0


class LargestNewTensor(TorchDispatchMode):
    """The largest tensor any op creates (outputs that are not an input's storage: no views,
    no in-place results), backward included."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


def test_no_temporary_as_large_as_the_weight(net):
    """Autograd's path creates the head weight's gradient anew for every use (the check can
    fail); the direct path creates none once ``.grad`` exists."""
    weight_bytes = net.lm_head.weight.numel() * 4
    accumulated_grads(net, plain_grads=True)  # .grad exists from here on
    data = rows(3)
    (plan,) = plan_micro_batches(data, range(len(data)), max_tokens=10**6, share_prefix=True)

    def largest_new_tensor(plain_grads: bool) -> int:
        stats = sequence_logprobs(net, plan.batch, chunk_size=4, plain_grads=plain_grads)
        loss = stats.logprobs.sum()
        with LargestNewTensor() as mode:
            loss.backward()
        return mode.largest

    assert largest_new_tensor(plain_grads=False) >= weight_bytes
    assert largest_new_tensor(plain_grads=True) < weight_bytes


def test_what_qualifies(net):
    body, head = split_model(net)
    assert direct_head(head) and direct_embedding(body) is net.model.embed_tokens
    assert not direct_head(torch.nn.Linear(4, 4))  # a bias
    head.weight.requires_grad_(False)  # frozen, as under LoRA
    assert not direct_head(head) and direct_embedding(body) is None

    class Scaled(torch.nn.Embedding):  # Gemma-style: the module's forward scales its output
        def forward(self, ids):
            return super().forward(ids) * 2.0

    body.embed_tokens = Scaled(10, 4)
    assert direct_embedding(body) is None


def test_project_needs_no_hidden_gradient():
    """Under a frozen body only the head's weight is trained."""
    head = torch.nn.Linear(3, 5, bias=False)
    hidden = torch.randn(2, 3)
    project(head, hidden).sum().backward()
    torch.testing.assert_close(head.weight.grad, hidden.sum(0).expand(5, 3))


def test_the_automatic_chunk_is_small_on_a_cpu(net):
    head = split_model(net)[1]
    assert auto_chunk_size(head) == max(16, 4 * 1024 * 1024 // 585)
    assert auto_chunk_size(torch.nn.Linear(8, 49152, device="meta")) == 682  # 128 MB elsewhere
