"""The torch train backend, LoRA and the shared helpers, on the tiny model (CPU)."""

from __future__ import annotations

import copy
import math
import sys

import pytest
import torch

from agentfly_cli.errors import UserError
from agentfly_cli.settings.train_backend import LoraSettings
from agentfly_cli.train_backends import TrainBackendSettings, build_train_backend
from agentfly_cli.train_backends.base import lr_factor

CPU = {"device": "cpu", "dtype": "float32"}


def make(tiny_model, **overrides):
    return build_train_backend(tiny_model, TrainBackendSettings(**{**CPU, **overrides}))


def batch(backend, rows=4, length=10, seed=0):
    vocab = backend.unwrapped().config.vocab_size
    return torch.randint(0, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))


def loss_of(backend, ids):
    return backend.model(input_ids=ids, labels=ids, use_cache=False).loss


def train_step(backend, *micro_batches):
    for ids in micro_batches:
        backend.backward(loss_of(backend, ids) / len(micro_batches))
    return backend.step()


def weights(backend):
    return {name: t.detach().clone() for name, t in backend.sync_weights()}


def max_change(before, after):
    return max((after[n] - before[n]).abs().max().item() for n in before)


# ---- full fine-tuning ----------------------------------------------------------------------


def test_step_changes_weights_and_returns_the_grad_norm(tiny_model):
    backend = make(tiny_model, lr=1e-3)
    before = weights(backend)
    norm = train_step(backend, batch(backend))
    assert math.isfinite(norm) and norm > 0
    assert max_change(before, weights(backend)) > 1e-4
    assert backend.is_main and backend.world_size == 1 and backend.rank == 0
    assert backend.unwrapped() is backend.model
    assert backend.model.config.use_cache is True  # left as is for generation


def test_clipping_bounds_the_update(tiny_model):
    changes, norms = {}, {}
    for limit in (1e-10, 1e3):
        backend = make(tiny_model, lr=1e-3, max_grad_norm=limit)
        before = weights(backend)
        norms[limit] = train_step(backend, batch(backend))
        changes[limit] = max_change(before, weights(backend))
    assert norms[1e-10] == pytest.approx(norms[1e3])  # the norm before clipping
    assert changes[1e3] > 5e-4  # Adam's first step moves by about lr
    assert changes[1e-10] < 1e-6  # clipped gradients far below eps barely move


def test_non_finite_loss_skips_the_step(tiny_model):
    backend = make(tiny_model, lr=1e-3, warmup_steps=2)
    before, lr = weights(backend), backend.current_lr()
    backend.backward(loss_of(backend, batch(backend)) * float("nan"))
    assert math.isnan(backend.step())
    assert max_change(before, weights(backend)) == 0
    assert backend.current_lr() == lr  # the schedule waits for an applied step
    assert math.isfinite(train_step(backend, batch(backend)))


@pytest.mark.parametrize(
    ("schedule", "step", "factor"),
    [
        ("linear", 0, 0.5),
        ("linear", 1, 1.0),
        ("linear", 2, 1.0),
        ("linear", 6, 0.55),
        ("linear", 10, 0.1),
        ("linear", 50, 0.1),
        ("cosine", 1, 1.0),
        ("cosine", 4, 0.1 + 0.45 * (1 + math.cos(math.pi / 4))),
        ("cosine", 6, 0.55),
        ("cosine", 10, 0.1),
        ("constant", 0, 0.5),
        ("constant", 7, 1.0),
    ],
)
def test_lr_factor(schedule, step, factor):
    config = TrainBackendSettings(
        lr_schedule=schedule, warmup_steps=2, total_steps=10, min_lr_ratio=0.1
    )
    assert lr_factor(step, config) == pytest.approx(factor)


def test_lr_schedule_through_the_backend(tiny_model):
    backend = make(tiny_model, lr=2e-3, lr_schedule="cosine", warmup_steps=2, total_steps=6)
    seen = []
    for _ in range(7):
        seen.append(backend.current_lr())
        backend.step()  # no gradients: the optimizer has nothing to do, the schedule moves
    want = [2e-3 * lr_factor(s, backend.config) for s in range(7)]
    assert seen == pytest.approx(want)
    assert seen[:3] == pytest.approx([1e-3, 2e-3, 2e-3])
    assert seen[-1] == pytest.approx(0.0)


def test_decaying_schedule_needs_total_steps(tiny_model):
    with pytest.raises(UserError, match="total_steps"):
        make(tiny_model, lr_schedule="linear")


def test_two_micro_batches_equal_one_batch(tiny_model):
    # eps 1e-6: Adam would blow float noise in gradients near its eps up to lr-sized steps
    one, two = (make(tiny_model, lr=1e-3, eps=1e-6) for _ in range(2))
    ids = batch(one, rows=4)
    norm_one = train_step(one, ids)
    norm_two = train_step(two, ids[:2], ids[2:])
    assert norm_two == pytest.approx(norm_one, rel=1e-5)
    a, b = weights(one), weights(two)
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-6, rtol=1e-5, msg=name)


def test_sync_weights_use_the_hf_names_and_shapes(tiny_model):
    backend = make(tiny_model)
    state = backend.unwrapped().state_dict()
    synced = dict(backend.sync_weights())
    assert list(synced) == list(state)
    assert all(synced[n].shape == state[n].shape for n in state)


def test_bfloat16_trains_with_float32_masters(tiny_model):
    backend = make(tiny_model, dtype="bfloat16", lr=1e-3)
    assert next(backend.model.parameters()).dtype == torch.bfloat16
    before = weights(backend)
    assert math.isfinite(train_step(backend, batch(backend, rows=2), batch(backend, seed=1)))
    after = weights(backend)
    assert max_change(before, after) > 1e-4
    assert all(t.dtype == torch.bfloat16 for t in after.values())
    masters = backend.state_dict()["masters"]
    assert masters and all(m.dtype == torch.float32 for m in masters)


def test_save_model_loads_with_from_pretrained(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    backend = make(tiny_model, lr=1e-3)
    train_step(backend, batch(backend))
    backend.save_model(tmp_path / "model")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model", dtype=torch.float32)
    ids = batch(backend, seed=3)
    backend.model.eval()
    with torch.no_grad():
        want = backend.model(input_ids=ids).logits
        got = loaded.eval()(input_ids=ids).logits
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_checkpoint_round_trip_restores_the_optimizer(tiny_model, tmp_path, dtype):
    settings = {"lr": 1e-3, "dtype": dtype, "lr_schedule": "linear", "total_steps": 5}
    straight = make(tiny_model, **settings)
    train_step(straight, batch(straight))
    straight.save_checkpoint(tmp_path / "ckpt")
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["train_state.pt"]
    train_step(straight, batch(straight, seed=1))

    resumed = make(tiny_model, **settings)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.current_lr() == pytest.approx(1e-3 * 0.8)  # linear decay, after 1 of 5
    train_step(resumed, batch(resumed, seed=1))
    a, b = weights(straight), weights(resumed)
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=0, rtol=0, msg=name)
    assert resumed.current_lr() == straight.current_lr()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_checkpoint_beside_a_model_folder_holds_no_weights_and_resumes_exactly(
    tiny_model, tmp_path, dtype
):
    """The run's checkpoint writes the model folder anyway: the backend state leaves the
    weights out (it held them a second time) and reads them back from there."""
    settings = {"lr": 1e-3, "dtype": dtype}
    straight = make(tiny_model, **settings)
    train_step(straight, batch(straight))
    straight.save_model(tmp_path / "model")
    straight.save_checkpoint(tmp_path / "backend", model_folder=tmp_path / "model")
    state = torch.load(tmp_path / "backend" / "train_state.pt", weights_only=True)
    assert "model" not in state and state["weights_in"] == "../model"
    train_step(straight, batch(straight, seed=1))

    resumed = make(tiny_model, **settings)
    resumed.load_checkpoint(tmp_path / "backend")
    train_step(resumed, batch(resumed, seed=1))
    a, b = weights(straight), weights(resumed)
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=0, rtol=0, msg=name)


def test_adamw_runs_fused_on_the_cpu(tiny_model):
    """The foreach AdamW allocates a temporary of every parameter's size (sqrt of the second
    moment); the fused one updates in place (and is many times faster on the CPU)."""
    assert make(tiny_model).optimizer.defaults["fused"] is True


def test_load_checkpoint_of_a_missing_folder(tiny_model, tmp_path):
    with pytest.raises(UserError, match="no train backend checkpoint"):
        make(tiny_model).load_checkpoint(tmp_path / "nope")


# ---- LoRA ----------------------------------------------------------------------------------


def lora(tiny_model, **overrides):
    return make(tiny_model, lora=LoraSettings(r=4, alpha=8), lr=1e-2, **overrides)


def test_lora_trains_only_the_adapters(tiny_model):
    backend = lora(tiny_model)
    trainable = [n for n, p in backend.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert math.isfinite(train_step(backend, batch(backend)))


def test_lora_merged_sync_equals_merge_and_unload(tiny_model):
    backend = lora(tiny_model)
    base = {n: t.clone() for n, t in backend.sync_weights()}
    train_step(backend, batch(backend))
    synced = dict(backend.sync_weights())
    merged = copy.deepcopy(backend.model).merge_and_unload().state_dict()
    assert list(synced) == list(merged)
    for name in merged:
        torch.testing.assert_close(synced[name], merged[name], msg=name)
    assert max_change(base, synced) > 1e-5
    # the trained model keeps its adapters unmerged
    assert any("lora_A" in n for n, _ in backend.model.named_parameters())
    assert not backend.model.base_model.model.model.layers[0].self_attn.q_proj.merged


def test_lora_adapter_sync_yields_the_adapter_tensors(tiny_model):
    from peft.utils import get_peft_model_state_dict

    backend = lora(tiny_model, sync="adapter")
    train_step(backend, batch(backend))
    synced = dict(backend.sync_weights())
    want = get_peft_model_state_dict(backend.model)
    assert synced.keys() == want.keys()
    assert all("lora_" in n for n in synced)


def test_lora_save_model_and_adapter(tiny_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    backend = lora(tiny_model)
    train_step(backend, batch(backend))
    backend.save_model(tmp_path / "merged")
    backend.save_adapter(tmp_path / "adapter")
    ids = batch(backend, seed=5)
    backend.model.eval()
    with torch.no_grad():
        want = backend.model(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32)
        torch.testing.assert_close(merged.eval()(input_ids=ids).logits, want)
        base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
        torch.testing.assert_close(adapted(input_ids=ids).logits, want)


def test_lora_with_gradient_checkpointing_and_checkpoint(tiny_model, tmp_path):
    backend = lora(tiny_model, gradient_checkpointing=True)
    assert backend.unwrapped().base_model.model.is_gradient_checkpointing
    assert math.isfinite(train_step(backend, batch(backend)))
    backend.save_checkpoint(tmp_path)
    state = backend.model_state()
    assert any("lora_A" in n for n in state) and any("base_layer" in n for n in state)
    saved = torch.load(tmp_path / "train_state.pt", weights_only=True)
    assert saved["trainable"] and all("lora_" in n for n in saved["trainable"])  # no base
    other = lora(tiny_model, gradient_checkpointing=True)
    other.load_checkpoint(tmp_path)
    a, b = weights(backend), weights(other)
    assert all(torch.equal(a[n], b[n]) for n in a)


# ---- missing extras ------------------------------------------------------------------------


def test_missing_peft_is_a_one_line_user_error(tiny_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(UserError) as info:
        lora(tiny_model)
    message = str(info.value)
    assert "\n" not in message and "pip install" in message and "peft" in message


def test_missing_deepspeed_is_a_one_line_user_error(tiny_model, monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)
    with pytest.raises(UserError) as info:
        make(tiny_model, name="deepspeed")
    message = str(info.value)
    assert "\n" not in message and "pip install" in message and "deepspeed" in message


def test_save_adapter_needs_lora(tiny_model, tmp_path):
    with pytest.raises(UserError, match="LoRA"):
        make(tiny_model).save_adapter(tmp_path)
