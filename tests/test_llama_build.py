"""scripts/llama_build.sh: which llama.cpp build an install picks, and that none of them compiles AMX in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "llama_build.sh"


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "AGENTFLOW_LLAMA_BUILD"} | env)


def test_the_default_is_the_native_build_and_the_setting_overrides_it():
    assert _run("choose").stdout.strip() == "native"
    assert _run("choose", AGENTFLOW_LLAMA_BUILD="portable").stdout.strip() == "portable"


@pytest.mark.parametrize("variant", ["native", "avx512"])
def test_no_variant_compiles_amx(variant):
    args = _run("args", variant).stdout
    assert "AMX" in args.upper() and ("-mno-amx-int8" in args or "-DGGML_AMX_INT8=OFF" in args)
    assert "-DGGML_AMX_INT8=ON" not in args


def test_portable_is_ggml_native_off_and_an_unknown_variant_is_refused():
    assert _run("args", "portable").stdout.strip() == "-DGGML_NATIVE=OFF"
    bad = _run("args", "fastest")
    assert bad.returncode != 0 and "unknown variant 'fastest'" in bad.stderr


def test_the_installed_build_loads_without_amx():
    """Whatever bootstrap installed (a native build by default), the library has no AMX code to crash in."""
    llama_cpp = pytest.importorskip("llama_cpp")
    info = llama_cpp.llama_print_system_info()
    info = info.decode() if isinstance(info, bytes) else str(info)
    assert "AMX" not in info.upper()
