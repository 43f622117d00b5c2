"""The deepspeed train backend on CPU: 2 ranks over gloo (torchrun) against the torch backend.

One torchrun launch runs every case (the first DeepSpeed start compiles its shm op, about 47 s,
then cached). Each rank trains 2 optimizer steps of 2 micro-batches on its own data; the
weights must equal a single-process torch run on the union of the data. This file is also the
worker script:
``python -m torch.distributed.run ... tests/train_backends/test_deepspeed.py OUT MODEL``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WORLD = 2
MICRO = 2  # micro-batches per rank and optimizer step
STEPS = 2
ROWS, LENGTH = 2, 12  # sequences per micro-batch, tokens per sequence
CASES = {
    "zero1": {"zero_stage": 1},
    "zero2": {"zero_stage": 2},
    "zero3": {"zero_stage": 3},
    "zero3-lora": {"zero_stage": 3, "lora": {"r": 4, "alpha": 8}},
}
COMMON = {
    "device": "cpu",
    "dtype": "float32",
    "lr": 1e-3,
    "eps": 1e-6,  # Adam amplifies reduction-order noise in gradients near eps
    "max_grad_norm": 1.0,
    "lr_schedule": "linear",
    "warmup_steps": 1,
    "total_steps": 4,
}


def settings(case: str, name: str):
    from agentfly_cli.train_backends import TrainBackendSettings

    return TrainBackendSettings(name=name, **COMMON, **CASES[case])


def data(vocab: int):
    """Token ids [STEPS, WORLD, MICRO, ROWS, LENGTH], the same in every process."""
    import torch

    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab, (STEPS, WORLD, MICRO, ROWS, LENGTH), generator=gen)


def train_step(backend, micro_batches) -> float:
    """Mean-token loss per micro-batch, scaled by 1/len: one optimizer step's mean."""
    for ids in micro_batches:
        out = backend.model(input_ids=ids, labels=ids, use_cache=False)
        backend.backward(out.loss / len(micro_batches))
    return backend.step()


def initial_lora_state(model: Path) -> dict:
    """A LoRA model state with non-zero B (so the first step moves A too), fixed by a seed."""
    import torch

    from agentfly_cli.train_backends import build_train_backend

    torch.manual_seed(7)
    backend = build_train_backend(model, settings("zero3-lora", "torch"))
    state = {k: v.clone() for k, v in backend.model_state().items()}
    for name, value in state.items():
        if "lora_B" in name:
            state[name] = torch.randn_like(value) * 0.02
    return state


# ---- the worker (one per rank) -------------------------------------------------------------


def worker(out: Path, model: Path) -> None:
    """Every case on this rank: train, sync, checkpoint round trip, save the model."""
    import torch

    from agentfly_cli.train_backends import build_train_backend

    torch.manual_seed(0)
    rank = int(os.environ["RANK"])
    results: dict = {}
    for case in CASES:
        config = settings(case, "deepspeed")
        backend = build_train_backend(model, config)
        ids = data(backend.unwrapped().config.vocab_size)
        if config.lora is not None:
            backend.load_model_state(initial_lora_state(model))
        norms = [train_step(backend, ids[0, rank])]
        backend.save_checkpoint(out / f"ckpt-{case}")
        norms.append(train_step(backend, ids[1, rank]))
        weights = {n: t.detach().clone().cpu() for n, t in backend.sync_weights()}
        lr = backend.current_lr()
        if case == "zero3":
            backend.save_model(out / "zero3-model")
        if config.lora is not None:
            backend.save_adapter(out / "zero3-adapter")
        backend.close()

        resumed = build_train_backend(model, config)
        resumed.load_checkpoint(out / f"ckpt-{case}")
        train_step(resumed, ids[1, rank])
        again = {n: t.detach().clone().cpu() for n, t in resumed.sync_weights()}
        resumed.close()
        results[case] = {"weights": weights, "norms": norms, "lr": lr, "resumed": again}
        print(f"rank {rank}: {case} done", flush=True)
    if rank == 0:
        torch.save(results, out / "results.pt")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


# ---- the test ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def distributed(tiny_model, tmp_path_factory):
    """Launch the workers once; the results of every case (rank 0's)."""
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed: make install-deepspeed")
    import torch

    out = tmp_path_factory.mktemp("deepspeed")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={WORLD}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        __file__,
        str(out),
        str(tiny_model),
    ]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-6000:]
        pytest.fail(f"torchrun failed with exit code {proc.returncode}:\n{tail}")
    return out, torch.load(out / "results.pt", weights_only=True)


@pytest.fixture(scope="module")
def reference(tiny_model):
    """The torch backend on the union of the ranks' data, one micro-batch per step."""
    import torch

    from agentfly_cli.train_backends import build_train_backend

    results = {}
    for case in CASES:
        config = settings(case, "torch")
        backend = build_train_backend(tiny_model, config)
        if config.lora is not None:
            backend.load_model_state(initial_lora_state(tiny_model))
        ids = data(backend.unwrapped().config.vocab_size)
        norms = []
        for step in range(STEPS):
            union = ids[step].reshape(WORLD * MICRO * ROWS, LENGTH)
            norms.append(train_step(backend, [union]))
        weights = {n: t.detach().clone() for n, t in backend.sync_weights()}
        results[case] = {"weights": weights, "norms": norms, "lr": backend.current_lr()}
        backend.close()
    assert torch.isfinite(torch.tensor(results["zero1"]["norms"])).all()
    return results


@pytest.mark.parametrize("case", list(CASES))
def test_matches_single_process_torch(distributed, reference, case):
    import torch

    _, results = distributed
    got, want = results[case], reference[case]
    assert got["weights"].keys() == want["weights"].keys()
    for name, tensor in want["weights"].items():
        assert got["weights"][name].shape == tensor.shape, name  # whole, also under ZeRO-3
        torch.testing.assert_close(got["weights"][name], tensor, atol=1e-5, rtol=1e-4, msg=name)
    assert got["norms"] == pytest.approx(want["norms"], rel=1e-4)
    assert got["lr"] == pytest.approx(want["lr"])


@pytest.mark.parametrize("case", list(CASES))
def test_checkpoint_round_trip(distributed, case):
    import torch

    _, results = distributed
    for name, tensor in results[case]["weights"].items():
        torch.testing.assert_close(results[case]["resumed"][name], tensor, atol=0, rtol=0)


def test_zero3_save_model_loads_without_deepspeed(distributed, reference):
    import torch
    from transformers import AutoModelForCausalLM

    out, _ = distributed
    model = AutoModelForCausalLM.from_pretrained(out / "zero3-model", dtype=torch.float32)
    state = model.state_dict()
    for name, tensor in reference["zero3"]["weights"].items():
        torch.testing.assert_close(state[name], tensor, atol=1e-5, rtol=1e-4, msg=name)


def test_zero3_lora_adapter_folder(distributed, reference):
    from safetensors.torch import load_file

    out, results = distributed
    adapter = load_file(out / "zero3-adapter" / "adapter_model.safetensors")
    assert adapter and all("lora_" in name for name in adapter)
    assert (out / "zero3-adapter" / "adapter_config.json").is_file()


if __name__ == "__main__":
    worker(Path(sys.argv[1]), Path(sys.argv[2]))
