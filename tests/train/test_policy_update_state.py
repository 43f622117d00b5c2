"""PolicyUpdate keeps its own checkpoint state: the value head and its optimizer, under the
keys old checkpoints have (``value_head``, ``value_optimizer``)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import torch

from agentfly_cli.recipes.loader import load_config
from agentfly_cli.train.update import PolicyUpdate

HIDDEN = 8


def policy_update(*, values: bool) -> PolicyUpdate:
    config = load_config("calculator", [], model="unused-model")
    train = SimpleNamespace(
        unwrapped=lambda: SimpleNamespace(config=SimpleNamespace(hidden_size=HIDDEN)),
        device=torch.device("cpu"),
    )
    return PolicyUpdate(
        config,
        train,
        eot_token_id=0,
        reference=None,
        share_prefix=False,
        chunk=64,
        temperature=1.0,
        advantage_fn=SimpleNamespace(needs_values=values),
        policy_loss_fn=None,
    )


def trained_a_little(update: PolicyUpdate) -> None:
    hidden = torch.randn(2, 3, HIDDEN)
    (update.critic(hidden) - 1).pow(2).sum().backward()  # the zero-initialised head moves
    update.critic.step(1.0, None)


def through_a_file(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def test_the_value_head_and_its_optimizer_round_trip_under_the_old_keys():
    torch.manual_seed(0)
    saved = policy_update(values=True)
    trained_a_little(saved)
    assert saved.critic.head.proj.weight.abs().sum() > 0
    extra = saved.extra_state()
    assert sorted(extra) == ["value_head", "value_optimizer"]
    extra = through_a_file(extra)  # as trainer_state.pt does: no tensor shared with `saved`

    resumed = policy_update(values=True)
    resumed.load_extra_state(extra)
    for name, tensor in saved.critic.head.state_dict().items():
        assert torch.equal(tensor, resumed.critic.head.state_dict()[name]), name
    assert resumed.critic.optimizer.state_dict()["state"], "the optimizer's moments came back"
    # both go on identically from there
    torch.manual_seed(1)
    trained_a_little(saved)
    torch.manual_seed(1)
    trained_a_little(resumed)
    assert torch.equal(saved.critic.head.proj.weight, resumed.critic.head.proj.weight)


def test_an_update_without_a_value_head_keeps_nothing_and_ignores_old_keys():
    plain = policy_update(values=False)
    assert plain.extra_state() == {}
    plain.load_extra_state(policy_update(values=True).extra_state())  # no head to load into
    assert plain.critic is None


def test_a_checkpoint_without_a_value_head_leaves_the_new_head_as_it_is():
    update = policy_update(values=True)
    before = {k: v.clone() for k, v in update.critic.head.state_dict().items()}
    update.load_extra_state({"task_stream": {}})
    assert all(torch.equal(before[k], v) for k, v in update.critic.head.state_dict().items())
