#!/usr/bin/env bash
# The device check of issue 11, for a machine with a CUDA GPU, Python 3.12, torch with
# CUDA, transformers, accelerate, safetensors, nanobind, scikit-build-core, CMake and
# ninja, and no network: builds the extension (the C++ GoogleTest suites are skipped),
# runs tests/device and the accelerator tests, then suite S4 (bench/s4_gpu.py). Writes
# logs and JSON into OUTDIR; every stage runs even when an earlier one failed, and the
# exit status says whether all passed. Meant to finish in under 8 minutes on one H200.
#
#   bench/gpu_check.sh OUTDIR
set -u
out=${1:?usage: bench/gpu_check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
venv=${TT_GPU_VENV:-/tmp/tt-gpu-venv}  # outside OUTDIR: it is not a result
status=0

stage() {  # stage NAME SECONDS COMMAND...: runs it under a time limit, logging to OUTDIR/NAME.log
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  # SIGINT first: pytest then still writes its summary and junit XML of the tests that ran.
  timeout -s INT -k 15 "$limit" "$@" >"$out/$name.log" 2>&1
  local code=$?
  echo "$name: exit $code after $((SECONDS - start)) s" | tee -a "$out/stages.txt"
  [ "$code" -eq 0 ] || status=1
}

# The machine's own torch and tools; only the package itself is built and installed. Its
# python3 may itself be a venv (the H200's is /opt/torch/.venv), whose packages a nested
# venv's --system-site-packages would not see: a .pth file in ours names its site-packages.
python3 -m venv "$venv"
purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -c 'import site; print("\n".join(site.getsitepackages()))' >"$purelib/machine-packages.pth"
stage venv 60 "$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "from", torch.__file__)'
stage build 240 "$venv/bin/pip" install --no-build-isolation --no-deps --no-index -e .
# pytest, where the machine lacks it, from wheels carried along (`make gpu-wheels` fetches them here).
if ! "$venv/bin/python" -c "import pytest" 2>/dev/null; then
  [ -d build/gpu-wheels ] || echo "no pytest here and no build/gpu-wheels: run make gpu-wheels and carry build/gpu-wheels" \
    | tee -a "$out/stages.txt"
  stage pytest-wheels 60 "$venv/bin/pip" install --no-index --find-links build/gpu-wheels pytest
fi
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
stage device-tests 150 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/device tests/e2e/test_accelerators.py \
  tests/e2e/test_device_direct.py tests/e2e/test_peer_devices.py tests/e2e/test_host_pins.py \
  --durations 20 --junitxml "$out/device-tests.xml"
stage s4 300 "$venv/bin/python" bench/s4_gpu.py --out "$out/s4.json"
exit $status
