#!/usr/bin/env bash
# Runs every GPU test and benchmark from a bundle made by tests/gpu/bundle.sh, on a GPU machine,
# from the repository root (it needs tests/python, bench/ and client/python from the checkout):
#   tests/gpu/run_bundle.sh [BUNDLE=.devbuild]
# Needs python3 with a CUDA build of torch, pytest and pybind11 there (the extension is compiled
# against that machine's Python). Full logs go to $SYNCD_GPU_LOGS (default $OUT, else a temporary
# folder); the tail of each is printed. Exits non-zero when any step failed.
set -uo pipefail
bundle=$(cd "${1:-.devbuild}" && pwd) || exit 2
logs=${SYNCD_GPU_LOGS:-${OUT:-$(mktemp -d)}}
mkdir -p "$logs"
export LD_LIBRARY_PATH=$bundle/lib UCX_MODULE_DIR=$bundle/lib/ucx SYNCD_BIN_DIR=$bundle/bin PYTHONUNBUFFERED=1
nvidia-smi -L || echo "run_bundle.sh: nvidia-smi found no GPU; the GPU tests will skip"
# NCCL is not in the bundle: the machine's own, from the loader's cache, CUDA's folder or the
# nvidia-nccl wheel that a CUDA build of torch brings.
if ! ldconfig -p | grep -q 'libnccl\.so\.2'; then
  for d in /usr/local/cuda/lib /usr/local/cuda/lib64 \
      "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)"; do
    [ -n "$d" ] && [ -e "$d/libnccl.so.2" ] && { LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; }
  done
fi
echo "== versions"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
nvidia-smi | grep -o 'CUDA Version: [0-9.]*' || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "torch nccl", torch.cuda.nccl.version())' || true
ldd "$bundle/bin/syncd" | grep -E 'nccl|not found' || true
python3 -c 'import ctypes; v = ctypes.c_int(); ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); print("nccl (loaded by syncd)", v.value)' || true

fake_build=$(mktemp -d)  # test_jobs.py finds the package in $SYNCD_BUILD_DIR/python
py=$fake_build/python
mkdir -p "$py/syncd"
cp -r client/python/syncd/* "$py/syncd/"
includes=$(python3 -m pybind11 --includes 2>/dev/null || python3-config --includes)  # pip pybind11, or the headers in /usr/include
if ! g++ -O2 -shared -fPIC -std=c++20 $includes -Iproto/include \
    client/python/src/client_module.cc -L"$bundle/lib" -lsyncclient \
    -o "$py/syncd/_client$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")"; then
  echo "run_bundle.sh: cannot build the Python extension here (pybind11 and the Python headers?)" >&2
  exit 2
fi

rc=0
step() {  # step NAME COMMAND...: runs it, logs to $logs/NAME.log, prints the tail
  local name=$1
  shift
  local start=$SECONDS
  echo "== $name: $*"
  if timeout -k 10 "${SYNCD_GPU_STEP_TIMEOUT:-300}" "$@" >"$logs/$name.log" 2>&1; then
    echo "   ok ($((SECONDS - start)) s)"
  else
    echo "   FAILED (rc $?, $((SECONDS - start)) s)"
    rc=1
  fi
  tail -n 25 "$logs/$name.log"
}
SYNCD_GPU_STEP_TIMEOUT=200 step gtest_gpu "$bundle/bin/syncd_integration_tests" --gtest_filter='Gpu*'
SYNCD_GPU_STEP_TIMEOUT=150 step bench_gpu bench/gpu.sh --ranks 2
SYNCD_GPU_STEP_TIMEOUT=90 step pytest_gpu env PYTHONPATH="$py" "$bundle/bin/syncrun" -n 2 -- python3 -m pytest -q tests/python/test_torch_gpu.py
SYNCD_GPU_STEP_TIMEOUT=90 step pytest_jobs_gpu env SYNCD_BUILD_DIR="$fake_build" python3 -m pytest -q -k gpu tests/python/test_jobs.py
echo "logs in $logs"
exit $rc
