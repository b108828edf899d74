#!/usr/bin/env bash
# Packs what the GPU tests and benchmarks need into one relocatable folder, to run them on a GPU
# machine that has the NVIDIA driver, NCCL and a CUDA build of PyTorch but not our build's
# dependencies (gRPC, protobuf, UCX, spdlog, hwloc...). tests/gpu/run_bundle.sh runs it there.
#   tests/gpu/bundle.sh [BUILD_DIR=build] [OUT=.devbuild]
# OUT/bin: syncd, syncctl, syncrun, syncd_integration_tests, syncd-gpu-bench (stripped);
# OUT/lib: libsyncclient and every shared library they load, except the C/C++ runtime, NCCL and
# the system's zlib/OpenSSL (the GPU machine has its own); OUT/lib/ucx: UCX's transport modules.
set -euo pipefail
build=${1:-build}
out=${2:-.devbuild}
[ -x "$build/bin/syncd_integration_tests" ] || { echo "bundle.sh: no test build in $build (build it first)" >&2; exit 2; }
grep -q 'SYNCD_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" || { echo "bundle.sh: $build was built without CUDA" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in syncd syncctl syncrun syncd_integration_tests syncd-gpu-bench; do
  cp "$build/bin/$b" "$out/bin/"
  strip "$out/bin/$b"
done
cp -a "$build"/lib/libsyncclient.so* "$out/lib/"
system='^(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt|libnccl|libz|libssl|libcrypto)\.so'
for f in "$out"/bin/* "$out"/lib/libsyncclient.so; do ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'; done | sort -u |
  while read -r lib; do
    [[ $(basename "$lib") =~ $system ]] || cp -L "$lib" "$out/lib/"
  done
ucx_modules=$(dirname "$(ldd "$build/bin/syncd" | awk '/libucp/ {print $3}')")/ucx
[ -d "$ucx_modules" ] && cp -rL "$ucx_modules" "$out/lib/ucx"
echo "bundle: $out ($(du -sh "$out" | cut -f1)); run it with tests/gpu/run_bundle.sh $out"
