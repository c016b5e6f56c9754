// The CUDA Backend: cuBLAS sgemm for Gemm, small CUDA kernels for the rest.
// Built from cuda_backend.cu by nvcc; this header has no CUDA includes, so
// any C++ target can use it. It compiles and links everywhere the CUDA
// toolkit is installed and runs where a GPU and driver exist.
//
// Because Backend takes host pointers, every call copies its inputs to
// device scratch buffers and its outputs back (a host<->device round trip per
// call). That is accepted for now; a device-resident tensor API would remove
// it.
//
// Errors: device discovery and initialisation failures are returned (nullptr
// + *error). A CUDA or cuBLAS failure AFTER a successful initialisation is a
// hardware or programmer error (lost device, out of device memory, bad
// launch): the backend prints the failing call and its error to stderr and
// calls std::abort().
//
// Thread-safety: a CUDA Backend is not thread-safe (it owns a stream, a
// cuBLAS handle and grow-only scratch buffers); use one per thread.
#ifndef PSCLUSTER_WORKER_CORE_CUDA_BACKEND_H_
#define PSCLUSTER_WORKER_CORE_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "worker/core/backend.h"

namespace pscluster {

// Number of CUDA devices visible to this process. Returns 0 and sets *error
// (if not null) to the reason, e.g. "cudaGetDeviceCount: CUDA driver version
// is insufficient for CUDA runtime version", when there is none.
int CudaDeviceCount(std::string* error);

// A Backend on CUDA device 0, name() "cuda:<device name>". Returns nullptr
// and sets *error (if not null) when no usable CUDA device exists (no driver,
// no device, or the device cannot be initialised).
std::unique_ptr<Backend> CreateCudaBackend(std::string* error, int device = 0);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_CUDA_BACKEND_H_
