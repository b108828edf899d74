#!/usr/bin/env bash
# libsyncclient must load into framework processes without dragging in gRPC, protobuf, spdlog,
# fmt, UCX or hwloc (TensorFlow and PyTorch ship their own copies; clashes are a classic failure).
set -euo pipefail
lib=$1
deps=$(ldd "$lib")
echo "$deps"
if echo "$deps" | grep -Ei 'grpc|protobuf|spdlog|fmt|ucx|ucp|ucs|hwloc|absl|ssl|crypto'; then
  echo "FAIL: $lib links a third-party library" >&2
  exit 1
fi
undefined=$(nm -D --undefined-only "$lib" | grep -Ei 'grpc|protobuf|spdlog|fmt::|ucp_|hwloc' || true)
[ -z "$undefined" ] || { echo "FAIL: undefined third-party symbols: $undefined" >&2; exit 1; }
echo "OK: only the C/C++ runtime"
