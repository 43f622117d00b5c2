"""The hf backend: exact greedy tokens, logprobs of the sampling distribution, batching,
sampling, weight sync."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from agentfly_cli.backends.base import BackendUnavailableError, SamplingParams  # noqa: E402
from agentfly_cli.backends.hf import HFBackend  # noqa: E402
from agentfly_cli.errors import UserError  # noqa: E402
from agentfly_cli.runtime.devices import pick_dtype  # noqa: E402
from agentfly_cli.settings.rollout import BackendSettings  # noqa: E402

TEXTS = [
    "Hello, world!",
    "What is 12 + 30? CALC: 12 + 30 RESULT:",
    "the quick brown fox jumps over the lazy dog. THE QUICK BROWN",
    "1",
    "You are a helpful assistant. Use the calculator tool to compute arithmetic. Question:",
]
GREEDY = SamplingParams(max_tokens=10, temperature=0.0)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def reference(tiny_model):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model).eval()


@pytest.fixture(scope="module")
def backend(tiny_model, tokenizer):
    b = HFBackend(BackendSettings(model=str(tiny_model), device="cpu"), tokenizer)
    yield b
    run(b.close())


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [tokenizer.encode(text) for text in TEXTS]


def greedy_reference(model, backend, prompt, n):
    out = model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=sorted(backend.eos_ids),
        pad_token_id=backend.pad_id,
    )
    return out[0, len(prompt) :].tolist()


def forward_logprobs(model, prompt, tokens):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    return logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def test_batched_greedy_equals_generate_and_logprobs_match_forward(backend, reference, prompts):
    async def go():
        return await asyncio.gather(*(backend.generate(p, GREEDY) for p in prompts))

    gens = run(go())
    for prompt, gen in zip(prompts, gens, strict=True):
        assert gen.token_ids == greedy_reference(reference, backend, prompt, 10)
        assert gen.finish_reason == "length" and gen.token_exact
        assert gen.info["batch_size"] == len(prompts)
        expected = forward_logprobs(reference, prompt, gen.token_ids)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)


@pytest.mark.parametrize("first", [3, 1])  # the running row's cache is shorter / longer
def test_requests_joining_a_running_batch_stay_exact(backend, reference, prompts, first):
    later = [p for i, p in enumerate(prompts) if i != first][:3]

    async def go():
        running = asyncio.ensure_future(
            backend.generate(prompts[first], SamplingParams(max_tokens=30, temperature=0))
        )
        start = backend.stats["decode_passes"]
        while backend.stats["decode_passes"] < start + 3:
            await asyncio.sleep(0.001)
        return await asyncio.gather(running, *(backend.generate(p, GREEDY) for p in later))

    gens = run(go())
    assert gens[0].token_ids == greedy_reference(reference, backend, prompts[first], 30)
    for prompt, gen in zip(later, gens[1:], strict=True):
        assert gen.token_ids == greedy_reference(reference, backend, prompt, 10)
        assert gen.info["batch_size"] == 4  # decoded alongside the first request
        expected = forward_logprobs(reference, prompt, gen.token_ids)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)


def processed_logprobs(model, prompt, tokens, temperature, top_k=0, top_p=1.0):
    """Logprobs under the distribution each token was drawn from: logits / T, then top-k,
    then top-p over the renormalised rest (vLLM's processed_logprobs)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    logits = logits.float() / temperature
    if top_k:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        probs = logits.softmax(-1)
        for row in range(probs.shape[0]):
            for token in range(probs.shape[1]):
                before = probs[row][probs[row] > probs[row, token]].sum()
                if before >= top_p:
                    logits[row, token] = float("-inf")
    return logits.log_softmax(-1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def test_sampled_tokens_carry_logprobs_of_the_processed_distribution(backend, reference, prompts):
    params = SamplingParams(max_tokens=12, temperature=0.7, top_k=20, top_p=0.9, seed=3)
    gen = run(backend.generate(prompts[1], params))
    expected = processed_logprobs(reference, prompts[1], gen.token_ids, 0.7, 20, 0.9)
    assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)
    assert gen.info["logprobs"] == "processed"


def test_tempered_tokens_carry_tempered_logprobs(tiny_model, tokenizer, reference, prompts):
    """What the trainer computes at the rollout temperature (without top-k/top-p)."""
    own = HFBackend(BackendSettings(model=str(tiny_model), device="cpu"), tokenizer)  # own cache
    params = SamplingParams(max_tokens=12, temperature=0.7, seed=3)
    gen = run(own.generate(prompts[1], params))
    expected = processed_logprobs(reference, prompts[1], gen.token_ids, 0.7)
    assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=1e-4)
    raw = forward_logprobs(reference, prompts[1], gen.token_ids)
    assert (torch.tensor(gen.logprobs) - raw).abs().max() > 1e-2  # not the T=1 logprobs
    run(own.close())


def test_seed_makes_sampling_repeatable(backend, prompts):
    def sample(seed):
        params = SamplingParams(max_tokens=16, temperature=1.0, seed=seed)
        return run(backend.generate(prompts[0], params)).token_ids

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_top_k_one_and_tiny_top_p_are_greedy(backend, prompts):
    greedy = run(backend.generate(prompts[1], GREEDY)).token_ids
    for params in (
        SamplingParams(max_tokens=10, temperature=1.5, top_k=1, seed=1),
        SamplingParams(max_tokens=10, temperature=1.0, top_p=1e-6, seed=2),
    ):
        assert run(backend.generate(prompts[1], params)).token_ids == greedy


def test_stop_token_ends_the_turn_and_is_included(backend, prompts):
    free = SamplingParams(max_tokens=10, temperature=1.0, seed=5)
    sampled = run(backend.generate(prompts[1], free)).token_ids
    cut = next(i for i, t in enumerate(sampled) if i > 0 and t not in sampled[:i])
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=5, stop_token_ids=(sampled[cut],))
    gen = run(backend.generate(prompts[1], params))
    assert gen.token_ids == sampled[: cut + 1]
    assert gen.finish_reason == "stop" and len(gen.logprobs) == cut + 1


def test_context_limit_and_empty_prompt(backend, prompts):
    saved = backend.max_context
    backend.max_context = len(prompts[1]) + 3
    try:
        gen = run(backend.generate(prompts[1], SamplingParams(max_tokens=50, temperature=0)))
        assert len(gen.token_ids) == 3 and gen.finish_reason == "length"
        backend.max_context = len(prompts[1])
        full = run(backend.generate(prompts[1], GREEDY))
        assert full.token_ids == [] and full.finish_reason == "length"
    finally:
        backend.max_context = saved
    with pytest.raises(ValueError, match="empty"):
        run(backend.generate([], GREEDY))


def test_64_concurrent_requests_share_forward_passes(backend, prompts):
    backend.stats.clear()
    n, tokens = 64, 16

    async def go():
        params = [SamplingParams(max_tokens=tokens, temperature=1.0, seed=i) for i in range(n)]
        # distinct prompts (identical ones would share one prefill row)
        return await asyncio.gather(
            *(backend.generate(prompts[i % len(prompts)] + [i], params[i]) for i in range(n))
        )

    gens = run(go())
    assert len(gens) == n and all(len(g.token_ids) == len(g.logprobs) for g in gens)
    assert backend.stats["max_batch_size_seen"] == n
    assert backend.forward_passes <= tokens + 2  # not 64 x 16
    assert backend.stats["generated_tokens"] == sum(len(g.token_ids) for g in gens)


def test_max_batch_size_caps_the_batch(tiny_model, tokenizer, prompts):
    b = HFBackend(BackendSettings(model=str(tiny_model), max_batch_size=3), tokenizer)

    async def go():
        gens = await asyncio.gather(*(b.generate(prompts[i % 5], GREEDY) for i in range(7)))
        await b.close()
        return gens

    gens = run(go())
    assert b.stats["max_batch_size_seen"] == 3 and len(gens) == 7


def test_update_weights_waits_for_the_running_batch(backend, prompts):
    before = run(backend.generate(prompts[1], GREEDY)).token_ids
    original = {k: v.clone() for k, v in backend.model.state_dict().items()}
    changed = {k: v * 0.5 + 0.01 for k, v in original.items() if k.endswith("proj.weight")}

    async def go():
        running = [asyncio.ensure_future(backend.generate(prompts[1], GREEDY)) for _ in range(3)]
        deadline = asyncio.get_running_loop().time() + 30
        while len(backend._active) < 3:  # running, not queued: queued requests get new weights
            assert asyncio.get_running_loop().time() < deadline, "the batch never admitted them"
            await asyncio.sleep(0.001)
        await backend.update_weights(changed)
        after = await backend.generate(prompts[1], GREEDY)
        return [g.token_ids for g in await asyncio.gather(*running)], after.token_ids

    during, after = run(go())
    assert all(tokens == before for tokens in during)  # finished on the old weights
    assert after != before
    run(backend.update_weights((f"module.{k}", v) for k, v in original.items()))
    assert run(backend.generate(prompts[1], GREEDY)).token_ids == before
    with pytest.raises(ValueError, match="not in the model"):
        run(backend.update_weights({"nope.weight": torch.zeros(1)}))


def test_each_generation_carries_the_version_of_the_weights_that_sampled_it(backend, prompts):
    from agentfly_cli.train_backends.weight_sync import FullPush

    class Train:  # what FullPush reads: the weights to push
        def sync_weights(self):
            return {k: v.clone() for k, v in backend.model.state_dict().items()}

    async def go():
        backend.policy_version = 4
        running = [asyncio.ensure_future(backend.generate(prompts[1], GREEDY)) for _ in range(2)]
        deadline = asyncio.get_running_loop().time() + 30
        while len(backend._active) < 2:  # admitted on version 4
            assert asyncio.get_running_loop().time() < deadline, "the batch never admitted them"
            await asyncio.sleep(0.001)
        push = asyncio.ensure_future(FullPush(Train(), backend).publish(5, timeout_s=60))
        await asyncio.sleep(0)  # the push has begun: a request sent now waits for it
        queued = asyncio.ensure_future(backend.generate(prompts[0], GREEDY))
        await push
        after = await backend.generate(prompts[0], GREEDY)
        return await asyncio.gather(*running), await queued, after

    during, queued, after = run(go())
    assert [g.policy_version for g in during] == [4, 4]  # finished on the old weights
    assert queued.policy_version == 5 and after.policy_version == 5
    assert backend.policy_version == 5
    backend.policy_version = 0


def test_the_version_moves_only_as_the_push_stops_admissions(backend, monkeypatch):
    """Between the trainer moving ``policy_version`` and the new weights loading, the batch
    admits nothing: else a request would run on the old weights stamped with the new version."""
    from agentfly_cli.train_backends.weight_sync import FullPush

    class Train:
        def sync_weights(self):
            return {k: v.clone() for k, v in backend.model.state_dict().items()}

    loaded = []
    load = backend._batch.load_weights
    monkeypatch.setattr(backend._batch, "load_weights", lambda w: (load(w), loaded.append(1)))

    async def go():
        push = asyncio.ensure_future(FullPush(Train(), backend).publish(1, timeout_s=60))
        seen = []
        while not push.done():  # every state the event loop passes through
            seen.append((backend.policy_version, backend._paused, bool(loaded)))
            await asyncio.sleep(0)
        await push
        return seen

    backend.policy_version = 0
    try:
        seen = run(go())
    finally:
        backend.policy_version = 0
    assert loaded and (1, True, False) in seen  # the push paused admissions under version 1
    unsafe = [state for state in seen if state == (1, False, False)]
    assert not unsafe, f"version 1 while the batch still admitted on the old weights: {seen}"


def test_cancelled_request_leaves_the_batch(backend, prompts):
    async def go():
        long = asyncio.ensure_future(
            backend.generate(prompts[0], SamplingParams(max_tokens=2000, temperature=1.0))
        )
        short = asyncio.ensure_future(backend.generate(prompts[1], GREEDY))
        await short
        long.cancel()
        # the worker drops it at its next step; a step can take long on a loaded machine
        for _ in range(500):
            if not backend._active:
                break
            await asyncio.sleep(0.01)
        return backend.stats["decode_passes"], len(backend._active)

    passes, active = run(go())
    assert active == 0 and passes < 2000  # dropped, not decoded to its 2000 tokens


def test_closed_backend_refuses_requests(tiny_model, tokenizer, prompts):
    b = HFBackend(BackendSettings(model=str(tiny_model)), tokenizer)
    run(b.close())
    with pytest.raises(BackendUnavailableError, match="closed"):
        run(b.generate(prompts[0], GREEDY))


def test_bad_dtype_and_missing_model_are_user_errors():
    with pytest.raises(UserError, match="dtype"):
        pick_dtype("float8", "cpu", "backend.dtype")
    with pytest.raises(UserError, match="backend.model"):
        HFBackend(BackendSettings(model=None))


def test_failed_forward_fails_its_requests_and_serving_goes_on(backend, prompts, monkeypatch):
    batch = backend._batch
    real = batch.prefill

    def broken(admit):
        monkeypatch.setattr(batch, "prefill", real)
        raise RuntimeError("out of memory")

    monkeypatch.setattr(batch, "prefill", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        run(backend.generate(prompts[0], GREEDY))
    assert len(run(backend.generate(prompts[0], GREEDY)).token_ids) == 10


def test_crashed_worker_fails_waiting_requests(backend, prompts, monkeypatch):
    def broken():
        raise KeyError("bug")

    monkeypatch.setattr(backend, "_take_admissions", broken)
    with pytest.raises(KeyError, match="bug"):
        run(backend.generate(prompts[0], GREEDY))
    monkeypatch.undo()
    assert len(run(backend.generate(prompts[0], GREEDY)).token_ids) == 10


def test_sliding_window_cache_batches_without_merging(tokenizer, prompts):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        use_sliding_window=True,
        sliding_window=6,
        max_window_layers=0,
        layer_types=["sliding_attention"] * 2,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    b = HFBackend(BackendSettings(model="in-memory"), tokenizer, model=model)

    async def go():
        first = asyncio.ensure_future(b.generate(prompts[1], GREEDY))
        await asyncio.sleep(0.01)
        rest = await asyncio.gather(*(b.generate(p, GREEDY) for p in prompts[2:]))
        await b.close()
        return [await first, *rest]

    gens = run(go())
    assert not b._batch.can_merge  # new requests waited for an empty batch
    for prompt, gen in zip([prompts[1], *prompts[2:]], gens, strict=True):
        assert gen.token_ids == greedy_reference(model, b, prompt, 10)


def test_a_group_with_one_prompt_prefills_it_once(tiny_model, tokenizer, prompts):
    b = HFBackend(BackendSettings(model=str(tiny_model), prefix_cache_tokens=0), tokenizer)
    n = 8

    async def go():
        params = [SamplingParams(max_tokens=4, temperature=1.0, seed=i) for i in range(n)]
        try:
            return await asyncio.gather(*(b.generate(prompts[0], p) for p in params))
        finally:
            await b.close()

    gens = run(go())
    assert b.stats["prompt_tokens"] == len(prompts[0])
    assert b.stats["shared_prompts"] == n - 1
    assert len({tuple(g.token_ids) for g in gens}) > 1  # each row still samples on its own


def test_next_turn_prefills_only_its_new_tokens_and_matches_a_cold_start(
    tiny_model, tokenizer, prompts
):
    """The stored KV of turn 1 serves turn 2: same greedy tokens and logprobs as no cache."""

    def two_turns(prefix_cache_tokens: int):
        b = HFBackend(
            BackendSettings(model=str(tiny_model), prefix_cache_tokens=prefix_cache_tokens),
            tokenizer,
        )

        async def go():
            try:
                first = await b.generate(prompts[1], SamplingParams(max_tokens=6, temperature=0))
                observation = tokenizer.encode("\nRESULT: 42\n", add_special_tokens=False)
                second_prompt = prompts[1] + first.token_ids + observation
                second = await b.generate(
                    second_prompt, SamplingParams(max_tokens=6, temperature=0)
                )
                return first, second, dict(b.stats)
            finally:
                await b.close()

        return run(go())

    first, second, stats = two_turns(4096)
    cold_first, cold_second, cold_stats = two_turns(0)
    assert first.token_ids == cold_first.token_ids
    assert second.token_ids == cold_second.token_ids
    assert second.logprobs == pytest.approx(cold_second.logprobs, abs=1e-4)
    assert stats["prefix_hit_tokens"] == len(prompts[1]) + len(first.token_ids) - 1
    assert stats["prompt_tokens"] < cold_stats["prompt_tokens"]


def test_new_weights_drop_stored_prefixes(tiny_model, tokenizer, prompts):
    b = HFBackend(BackendSettings(model=str(tiny_model)), tokenizer)

    async def go():
        try:
            first = await b.generate(prompts[0], SamplingParams(max_tokens=3, temperature=0))
            assert len(b._batch.prefix) == 1
            await b.update_weights(b.model.state_dict())
            assert len(b._batch.prefix) == 0
            follow = prompts[0] + first.token_ids + [1]
            await b.generate(follow, SamplingParams(max_tokens=2, temperature=0))
            return b.stats["prefix_hit_tokens"]
        finally:
            await b.close()

    assert run(go()) == 0


def test_a_bad_weight_update_changes_nothing(tiny_model, tokenizer):
    import torch

    b = HFBackend(BackendSettings(model=str(tiny_model)), tokenizer)
    before = {k: v.clone() for k, v in b.model.state_dict().items()}
    good = {k: torch.zeros_like(v) for k, v in before.items()}
    wrong_shape = dict(good)
    name = next(iter(wrong_shape))
    wrong_shape[name] = torch.zeros(3)
    unknown = {**good, "no.such.weight": torch.zeros(1)}

    async def go():
        try:
            for bad, message in ((wrong_shape, "shape"), (unknown, "not in the model")):
                with pytest.raises(ValueError, match=message):
                    await b.update_weights(bad)
                after = b.model.state_dict()
                assert all(torch.equal(after[k], before[k]) for k in before)
        finally:
            await b.close()

    run(go())


def test_update_adapter_samples_from_the_pushed_lora_policy(tiny_model, tokenizer, prompts):
    """Pushed adapters (as PEFT saves them) turn the backend into the trained LoRA policy."""
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    policy = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), config).eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # fresh adapters are zero: make them matter
    adapters = peft.get_peft_model_state_dict(policy)
    backend = HFBackend(BackendSettings(model=str(tiny_model), device="cpu"), tokenizer)
    greedy = SamplingParams(max_tokens=6, temperature=0.0)
    before = run(backend.generate(prompts[0], greedy))
    run(backend.update_adapter(adapters, config))
    after = run(backend.generate(prompts[0], greedy))
    assert backend.stats["adapter_updates"] == 1
    assert after.logprobs == pytest.approx(
        forward_logprobs(policy, prompts[0], after.token_ids), abs=1e-4
    )
    assert after.logprobs != pytest.approx(before.logprobs, abs=1e-3)
    with pytest.raises(ValueError, match="do not fit the model"):
        run(backend.update_adapter({"base_model.model.nope.lora_A.weight": torch.zeros(1)}, config))
    run(backend.close())
