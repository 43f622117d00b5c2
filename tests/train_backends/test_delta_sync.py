"""Delta weight sync: after the first push, only the tensors that changed travel (frozen layers
and LoRA-untouched weights stay), the backend ends equal to the trainer tensor for tensor, and
the checksum sees a tensor changed in place."""

from __future__ import annotations

import asyncio
from fnmatch import fnmatchcase

import pytest
import torch

from agentfly_cli.backends.hf import HFBackend
from agentfly_cli.errors import UserError
from agentfly_cli.settings.rollout import BackendSettings
from agentfly_cli.train_backends import build_train_backend
from agentfly_cli.train_backends.base import LoraSettings, TrainBackendSettings
from agentfly_cli.train_backends.delta_sync import PushMeter, checksum, same_checksum
from agentfly_cli.train_backends.weight_sync import FullPush

CPU = {"device": "cpu", "dtype": "float32", "lr": 1e-2}
FROZEN = ["model.embed_tokens.*", "model.layers.0.*"]


def nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def train_step(train, seed: int) -> None:
    vocab = train.unwrapped().config.vocab_size
    ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(seed))
    train.backward(train.model(input_ids=ids, labels=ids, use_cache=False).loss)
    train.step()


async def pushes(train, backend, steps: int, *, delta: bool = True) -> list[dict[str, float]]:
    """One push before training and one after each of ``steps`` optimizer steps."""
    sync = FullPush(train, backend, delta=delta)
    seen = []
    for version in range(steps + 1):
        if version:
            train_step(train, version)
        await sync.publish(version)
        seen.append(sync.metrics())
    return seen


def rollout_backend(tiny_model) -> HFBackend:
    return HFBackend(BackendSettings(name="hf", model=str(tiny_model), dtype="float32"))


def assert_backend_equals_trainer(train, held) -> None:
    for name, tensor in train.sync_weights():
        assert torch.equal(held[name], tensor), name


def run(train, backend, steps=3, **kw):
    """The pushes' metrics, and the backend's weights after them."""

    async def go():
        try:
            seen = await pushes(train, backend, steps, **kw)
            return seen, {k: v.clone() for k, v in backend.model.state_dict().items()}
        finally:
            await backend.close()

    return asyncio.run(go())


def test_a_partly_frozen_model_pushes_all_but_the_frozen_share(tiny_model):
    train = build_train_backend(tiny_model, TrainBackendSettings(**CPU, freeze=FROZEN))
    backend = rollout_backend(tiny_model)
    weights = dict(train.sync_weights())
    total = sum(nbytes(t) for t in weights.values())
    frozen = [n for n in weights if any(fnmatchcase(n, p) for p in FROZEN)]
    # the tiny model ties lm_head to the embedding: frozen with it
    frozen += [n for n in ("lm_head.weight",) if n in weights and n not in frozen]
    frozen_bytes = sum(nbytes(weights[n]) for n in frozen)
    assert 0 < frozen_bytes < total
    seen, held = run(train, backend)
    assert seen[0]["sync/bytes_pushed"] == total and seen[0]["sync/tensors_skipped"] == 0
    for metrics in seen[1:]:
        assert metrics["sync/bytes_pushed"] == total - frozen_bytes
        assert metrics["sync/bytes_skipped"] == frozen_bytes
        assert metrics["sync/tensors_skipped"] == len(frozen)
    assert_backend_equals_trainer(train, held)


def test_a_lora_merged_model_pushes_only_the_adapted_weights(tiny_model):
    lora = LoraSettings(r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    train = build_train_backend(tiny_model, TrainBackendSettings(**CPU, lora=lora))
    backend = rollout_backend(tiny_model)
    weights = dict(train.sync_weights())
    total = sum(nbytes(t) for t in weights.values())
    adapted = [n for n in weights if n.endswith(("q_proj.weight", "v_proj.weight"))]
    adapted_bytes = sum(nbytes(weights[n]) for n in adapted)
    seen, held = run(train, backend)
    assert seen[0]["sync/bytes_pushed"] == total
    for metrics in seen[1:]:  # untouched layers' merged weights are their base, bit for bit
        assert metrics["sync/bytes_pushed"] == adapted_bytes
        assert metrics["sync/tensors_pushed"] == len(adapted)
        assert metrics["sync/bytes_skipped"] == total - adapted_bytes
    assert_backend_equals_trainer(train, held)


def test_delta_sync_off_pushes_everything_every_time(tiny_model):
    train = build_train_backend(tiny_model, TrainBackendSettings(**CPU, freeze=FROZEN))
    total = sum(nbytes(t) for _, t in train.sync_weights())
    seen, _ = run(train, rollout_backend(tiny_model), steps=2, delta=False)
    assert [m["sync/bytes_pushed"] for m in seen] == [total] * 3
    assert all(m["sync/tensors_skipped"] == 0 for m in seen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7, 13), (64, 65), (3,), ()])
def test_the_checksum_sees_one_element_changed_in_place(dtype, shape):
    tensor = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    before = checksum(tensor)
    assert same_checksum(before, checksum(tensor.clone()))
    flat = tensor.view(-1)
    flat[flat.numel() // 2] = flat[flat.numel() // 2] * 1.01 + 1e-3  # in place, one element
    assert not same_checksum(before, checksum(tensor))


def test_the_checksum_sees_elements_swapped_across_chunks_and_a_new_dtype():
    tensor = torch.arange(640, dtype=torch.float32)
    before = checksum(tensor)
    swapped = tensor.clone()
    swapped[[0, 639]] = swapped[[639, 0]]
    assert not same_checksum(before, checksum(swapped))
    assert not same_checksum(before, checksum(tensor.view(torch.int32)))


class FailingOnce:
    """A backend whose first push after the initial one fails (the weights stay as they were)."""

    name, takes_weights, takes_partial_weights, policy_version = "fake", True, True, 0

    def __init__(self) -> None:
        self.calls, self.received = 0, []

    async def update_weights(self, named_tensors) -> None:
        self.calls += 1
        names = [name for name, _ in named_tensors]
        if self.calls == 2:
            raise ValueError("push failed")
        self.received.append(names)


def test_a_failed_push_is_sent_again_by_the_next():
    weight = torch.nn.Parameter(torch.zeros(4))

    class Train:
        def sync_weights(self):
            return iter([("a", weight.detach()), ("b", torch.ones(3))])

    backend = FailingOnce()
    sync = FullPush(Train(), backend, delta=True)

    async def go():
        await sync.publish(0)
        with torch.no_grad():
            weight.add_(1.0)
        with pytest.raises(ValueError):
            await sync.publish(1)
        await sync.publish(1)

    asyncio.run(go())
    assert backend.received == [["a", "b"], ["a"]]  # "a" again: the failed push never landed


def test_a_meter_without_delta_counts_but_skips_nothing():
    meter = PushMeter(delta=False)
    pairs = [("x", torch.zeros(2, 2))]
    for _ in range(2):
        assert [n for n, _ in meter.filter(pairs)] == ["x"]
        meter.commit()
    assert meter.last["sync/bytes_pushed"] == 16 and meter.last["sync/bytes_skipped"] == 0


def test_a_freeze_pattern_that_matches_nothing_is_one_clear_error(tiny_model):
    with pytest.raises(UserError, match=r"trainer.backend.freeze: 'model.layer.\*' matches no"):
        build_train_backend(tiny_model, TrainBackendSettings(**CPU, freeze=["model.layer.*"]))
