#!/usr/bin/env bash
# Certify the torch, vLLM and SGLang decoders on a CUDA GPU, with the engines' CUDA builds, and
# SGLang's tree verifier tree_speculative_sampling_target_only (thresholds 1 and 0.5).
#
# UNTESTED: written in a session without a GPU. The same adapters run on the CPU through
# Triton's interpreter (tests/test_backend_*.py); on a GPU they run the compiled kernels.
#
# Needs: an NVIDIA GPU with a driver, Python 3.11, and PyPI (vLLM's wheel brings its CUDA
# torch 2.14.0 and triton). It makes its own venv (default .venv-cuda) so the CPU
# environment (torch 2.13.0) is not touched. SGLang is installed --no-deps: its chain kernel
# needs only triton, and its own pins (torch 2.14.1) clash with vLLM's (torch 2.14.0).
#
# Usage: bash scripts/certify-cuda.sh [TV]        (default TV 0.01; a few minutes on an H100/H200)
# Output: specgauge-out/cuda/<decoder>.csv (one row per assertion) and a summary per decoder on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

TV=${1:-${SPECGAUGE_CUDA_TV:-0.01}}
VENV=${VENV:-.venv-cuda}
OUT=${OUT:-specgauge-out/cuda}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "certify-cuda: no NVIDIA GPU here (nvidia-smi -L failed); on a CPU use scripts/install-cpu-backends.sh and tests/test_backend_*.py" >&2
  exit 2
fi
nvidia-smi -L

if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
. "$VENV/bin/activate"
python -m pip install --disable-pip-version-check -q "vllm==0.33.0"
python -m pip install --disable-pip-version-check -q --no-deps "sglang==0.5.23"
# specgauge itself, without its extras (they pin the CPU torch 2.13.0), then its core deps.
python -m pip install --disable-pip-version-check -q --no-deps -e .
python -m pip install --disable-pip-version-check -q "numpy>=1.26" "scipy>=1.11" "pandas>=2.1" "pytest>=8" "tqdm>=4.66"

mkdir -p "$OUT"
SPECGAUGE_CUDA_TV="$TV" SPECGAUGE_CUDA_OUT="$OUT" python - <<'PY'
import os, time
import torch
from specgauge.stattests.chain.certify import CertConfig, certify

assert torch.cuda.is_available(), "torch sees no CUDA device"
gpu = torch.cuda.get_device_name(0)
tv = float(os.environ["SPECGAUGE_CUDA_TV"])
out = os.environ["SPECGAUGE_CUDA_OUT"]
config = CertConfig(tv=tv, false_fail=1e-6, seed=0)
print(f"GPU: {gpu}; torch {torch.__version__}; TV {tv}")

def build():
    from specgauge.stattests.decoders.torch_decoder import TorchDecoder
    from specgauge.stattests.decoders.vllm import VLLMDecoder, VLLMGreedyDecoder, VLLMOneHotDecoder
    from specgauge.stattests.decoders.sglang import SGLangBlockDecoder, SGLangDecoder
    yield "torch", lambda: TorchDecoder(device="cuda"), None
    yield "vllm", VLLMDecoder, None
    yield "vllm-onehot", VLLMOneHotDecoder, None
    yield "vllm-greedy", VLLMGreedyDecoder, ["greedy"]
    yield "sglang", SGLangDecoder, None
    yield "sglang-block", SGLangBlockDecoder, None

failures = 0
for name, make, fixtures in build():
    start = time.perf_counter()
    try:
        decoder = make()
    except Exception as exc:  # report and go on with the others
        print(f"\n== {name}: could not be built: {type(exc).__name__}: {exc}")
        failures += 1
        continue
    checks = ["contract", "greedy"] if fixtures == ["greedy"] else None
    cert = certify(decoder, config, checks=checks, fixtures=fixtures)
    cert.frame.assign(decoder=name, gpu=gpu).to_csv(os.path.join(out, f"{name}.csv"), index=False)
    rows = int(cert.frame.loc[cert.frame["check"] == "contract", "n"].sum())
    elapsed = time.perf_counter() - start
    print(f"\n== {name} on {gpu}: {getattr(decoder, 'backend', type(decoder).__name__)}; "
          f"{rows} rows in {elapsed:.0f} s")
    print(cert.summary())
# Tree verification: SGLang's EAGLE-2/3 kernel, thresholds at 1 (exact) and at 0.5 (lossy by
# design: the certificate must say so and the measured TV is printed).
from specgauge.stattests.tree.checks import TreeCertConfig, certify_tree
tree_config = TreeCertConfig(tv=max(tv, 0.01), false_fail=1e-6, seed=0)
for name, threshold in (("sglang-tree", 1.0), ("sglang-tree-relaxed", 0.5)):
    start = time.perf_counter()
    try:
        from specgauge.stattests.decoders.sglang_tree import SGLangTreeDecoder
        decoder = SGLangTreeDecoder(threshold_single=threshold, threshold_acc=threshold)
    except Exception as exc:  # report and go on
        print(f"\n== {name}: could not be built: {type(exc).__name__}: {exc}")
        failures += 1
        continue
    cert = certify_tree(decoder, tree_config, name=name)
    cert.frame.assign(gpu=gpu).to_csv(os.path.join(out, f"{name}.csv"), index=False)
    exact_rows = cert.frame[cert.frame["check"] == "exactness"]
    worst = exact_rows["observed"].astype(float).max()  # measured TV at each depth
    print(f"\n== {name} (threshold_single = threshold_acc = {threshold}) on {gpu}: "
          f"{time.perf_counter() - start:.0f} s; largest measured TV at a depth {worst:.4g}")
    print(cert.summary())
print(f"\ncertificates in {out}/")
raise SystemExit(1 if failures else 0)
PY
