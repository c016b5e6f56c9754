#!/usr/bin/env bash
# No pscluster binary links a CUDA library: the CUDA backend is
# libpscluster_cuda.so, dlopened by the worker only for a GPU job
# (worker/core/cuda_backend_loader.h). Also checks that the library sits next
# to worker_server, where the worker looks for it.
# Usage: no_cuda_link_test.sh BINARY...   (worker_server first)
set -euo pipefail
# CUDA toolkit and driver libraries (not libcurl and friends).
CUDA_LIBS='lib(cuda|cudart|cublas|cublasLt|cufft|curand|cusolver|cusparse|cudnn|nvrtc|nvJitLink|nvidia-)[^ ]*\.so'
status=0
for bin in "$@"; do
  if ! out=$(ldd "$bin" 2>&1); then
    echo "FAIL: ldd $bin: $out" >&2
    status=1
    continue
  fi
  if grep -E "$CUDA_LIBS" <<<"$out"; then
    echo "FAIL: $bin links CUDA libraries (above)" >&2
    status=1
  else
    echo "ok: $bin links no CUDA library"
  fi
done
lib="$(dirname "$1")/libpscluster_cuda.so"
if [[ -f "$lib" ]]; then
  echo "ok: $lib is next to $1"
else
  echo "FAIL: $lib is missing (worker_server loads the CUDA backend from there)" >&2
  status=1
fi
exit "$status"
