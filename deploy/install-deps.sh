#!/usr/bin/env bash
# Installs every Debian package syncd needs to build, test and benchmark; with --sanitize also
# clang and its sanitizer and libFuzzer runtimes (deploy/sanitize.sh).
# Idempotent and quiet: packages already present are skipped without touching apt.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # daemon dependencies
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libssl-dev
  libucx-dev libspdlog-dev libfmt-dev libcli11-dev libhwloc-dev
  # the metrics endpoint: prometheus-cpp's registry model and its pull server, which runs on civetweb
  libcivetweb-dev prometheus-cpp-dev
  # plan hashes and partial round initiators; flat hash tables (the request ledger)
  libxxhash-dev libabsl-dev
  # PowerSGD's matrix products in the daemon (header-only, one thread: the daemon's own core)
  libeigen3-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # python binding and peers (torch.distributed/gloo is the benchmark peer)
  pybind11-dev python3-dev python3-pytest python3-numpy python3-torch
  # the torch.distributed backend (syncd._c10d): torch's C++ headers and libtorch_python
  libtorch-dev
  # deployment tests: a real Slurm (two slurmd on this machine) and systemd-analyze for the unit
  slurmd slurmctld slurm-client munge systemd
  # the quickstart's dataset (scikit-learn's bundled digits) and the torchvision benchmark models
  python3-sklearn python3-torchvision
  # MPI_Allreduce: the peer of bench/partial.sh and bench/compare.sh; ucx_perftest: compare.sh's
  # limit across nodes (UCX point-to-point bandwidth)
  openmpi-bin libopenmpi-dev ucx-utils
  # a real Prometheus server (and promtool) that scrapes the metrics endpoint in the tests
  prometheus
  # syncctl report's plots, and the headless browser its test opens the page in
  python3-matplotlib chromium chromium-driver python3-selenium
  # syncrun --netns: network namespaces, veth links and their rates (ip, tc)
  iproute2
  # the documentation site (docs/mkdocs.yml), built and link-checked by a test
  mkdocs
  # the installed package: manual pages from --help, the Debian package's tools (cpack -G DEB,
  # dpkg-shlibdeps) and `man` for the install test
  help2man dpkg-dev man-db
)

[ "${1:-}" = "--sanitize" ] && packages+=(clang libclang-rt-14-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}" >&2
"${sudo_cmd[@]}" apt-get update -qq >/dev/null
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
