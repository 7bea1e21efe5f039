#!/usr/bin/env bash
# The device check of issue 11, for a machine with a CUDA GPU, Python 3.12, torch with
# CUDA, transformers, accelerate, safetensors, nanobind, scikit-build-core, CMake and
# ninja, and no network: builds the extension (the C++ GoogleTest suites are skipped),
# runs suite S4 (bench/s4_gpu.py), then tests/device and the accelerator tests. Writes
# logs and JSON into OUTDIR; every stage runs even when an earlier one failed, and the
# exit status says whether all passed. Meant to finish in under 8 minutes on one H200:
# the stages share TT_GPU_CHECK_SECONDS (470 s unless set), each under a limit of its own.
#
#   bench/gpu_check.sh OUTDIR
set -u
out=${1:?usage: bench/gpu_check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
venv=${TT_GPU_VENV:-/tmp/tt-gpu-venv}  # outside OUTDIR: it is not a result
budget=${TT_GPU_CHECK_SECONDS:-470}  # the whole check; the later stages get what the earlier left
status=0

within() {  # within MARGIN CAP: the seconds a stage may take, at most CAP, leaving MARGIN of the budget (at least 1)
  local left=$((budget - SECONDS - $1))
  [ "$left" -gt "$2" ] && left=$2
  [ "$left" -lt 1 ] && left=1  # never 0: timeout 0 means no limit
  echo "$left"
}

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
# venv's --system-site-packages would not see: a .pth file in ours adds its site-packages
# as site directories (so their own .pth files, editable installs among them, count too).
python3 -m venv "$venv"
purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -c 'import site; print("\n".join(f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()))' \
  >"$purelib/machine-packages.pth"
# A torch without a GPU would skip every device test and still pass: that fails here.
stage venv 30 "$venv/bin/python" -c '
import torch
print("torch", torch.__version__, "from", torch.__file__, "cuda", torch.version.cuda)
assert torch.cuda.is_available(), "torch sees no CUDA device"
print(torch.cuda.get_device_name(0))'
# Warnings are not errors here: a compiler we have not built with may warn anew.
stage build 150 "$venv/bin/pip" install --no-build-isolation --no-deps --no-index \
  --config-settings=cmake.define.TT_WERROR=OFF -e .
# What the machine may lack (pytest for the tests, rich for progress on a terminal), from
# wheels carried along (`make gpu-wheels` fetches them here).
missing=$("$venv/bin/python" -c 'import importlib.util as u; print(*(m for m in ("pytest", "rich") if not u.find_spec(m)))')
if [ -n "$missing" ]; then
  [ -d build/gpu-wheels ] || echo "missing $missing and no build/gpu-wheels: run make gpu-wheels and carry build/gpu-wheels" \
    | tee -a "$out/stages.txt"
  stage wheels 30 "$venv/bin/pip" install --no-index --find-links build/gpu-wheels $missing
fi
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
# S4 first: its figures are what the check is for (up to 240 s, leaving the tests 100 s at
# least); the tests end with the slowest (inductor's cold compiles) and get the rest.
stage s4 "$(within 100 240)" "$venv/bin/python" bench/s4_gpu.py --out "$out/s4.json"
stage device-tests "$(within 20 600)" "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/e2e/test_accelerators.py \
  tests/e2e/test_device_direct.py tests/e2e/test_peer_devices.py tests/e2e/test_host_pins.py tests/device \
  --durations 20 --junitxml "$out/device-tests.xml"
exit $status
