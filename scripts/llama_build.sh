#!/usr/bin/env bash
# llama-cpp-python builds, one per CPU kind, each kept as a wheel outside the repo and reused by fresh clones.
#   scripts/llama_build.sh choose            -> the variant for this CPU (AGENTFLOW_LLAMA_BUILD overrides)
#   scripts/llama_build.sh wheel VARIANT     -> path of VARIANT's wheel, built first when missing (about 4-7 min)
#   scripts/llama_build.sh args VARIANT      -> the CMAKE_ARGS of VARIANT
# Variants (none of them uses AMX: its extra buffer type crashes on the first decode, ENVIRONMENT.md):
#   native    the default: -march=native with AMX compiled out (-mno-amx-*), so AVX-512/VNNI/BF16 where the CPU has
#             them and AVX2 elsewhere; keyed by this CPU's model and flags. bootstrap.sh smoke-tests it and falls back
#             to portable when it fails.
#   portable  GGML_NATIVE=OFF: AVX2/FMA/F16C, runs on any x86-64 of the last decade.
#   avx512    portable + AVX-512 F/BW/VL/VNNI (+BF16, VBMI when the CPU has them), AMX off: a wheel for a fleet of
#             AVX-512 machines (AGENTFLOW_LLAMA_BUILD=avx512).
# Why the choice: docs/inference.md (side by side on this machine's CPU, flows/bench/llama.py).
set -euo pipefail
PY=${PYTHON_FOR_BUILD:-${VENV:-.venv}/bin/python}
LLAMA_VERSION=${LLAMA_VERSION:-0.3.36}
ROOT=${AGENTFLOW_WHEELHOUSE:-$HOME/.cache/agentflow/llama-wheels}

cpu_flags() { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2 || true; }
has() { cpu_flags | tr ' ' '\n' | grep -qx "$1"; }
cpu_key() { (grep -m1 'model name' /proc/cpuinfo 2>/dev/null; cpu_flags) | sha256sum | cut -c1-10; }

choose() {
  if [ -n "${AGENTFLOW_LLAMA_BUILD:-}" ]; then echo "$AGENTFLOW_LLAMA_BUILD"; return; fi
  echo native
}

cmake_args() {
  case "$1" in
    portable) echo "-DGGML_NATIVE=OFF" ;;
    avx512)
      local a="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
      a="$a -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
      if has avx512_bf16; then a="$a -DGGML_AVX512_BF16=ON"; fi
      if has avx512vbmi; then a="$a -DGGML_AVX512_VBMI=ON"; fi
      echo "$a" ;;
    native) echo "-DGGML_NATIVE=ON -DCMAKE_C_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16 -DCMAKE_CXX_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16" ;;
    *) echo "llama_build: unknown variant '$1' (portable, avx512, native)" >&2; return 2 ;;
  esac
}

dir_for() { if [ "$1" = native ]; then echo "$ROOT/native-$(cpu_key)"; else echo "$ROOT/$1"; fi; }

wheel() {
  local variant=$1 dir args
  dir=$(dir_for "$variant")
  args=$(cmake_args "$variant")
  if ! ls "$dir"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
    echo "llama_build: building llama-cpp-python $LLAMA_VERSION ($variant: $args), 4-7 min on 2 cores" >&2
    mkdir -p "$dir"
    # --no-cache-dir: pip's wheel cache is keyed by the sdist alone and would hand back another variant's build.
    CMAKE_ARGS="$args" "$PY" -m pip wheel -q --no-cache-dir --no-deps -w "$dir" "llama-cpp-python==$LLAMA_VERSION" >&2
  fi
  ls "$dir"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -1
}

case "${1:-}" in
  choose) choose ;;
  wheel) wheel "${2:?variant}" ;;
  args) cmake_args "${2:?variant}" ;;
  *) echo "usage: $0 choose | wheel VARIANT | args VARIANT" >&2; exit 2 ;;
esac
