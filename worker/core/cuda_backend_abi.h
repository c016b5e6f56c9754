// The entry points of libpscluster_cuda.so, the CUDA backend as a shared
// library (//worker:libpscluster_cuda.so). The worker loads it with dlopen
// (cuda_backend_loader.h) only when a job asks for a GPU, so no binary links
// CUDA itself.
//
// The symbols are extern "C" so that dlsym finds them by these names. They
// hand over a C++ object (a pscluster::Backend), which is sound because the
// library and the worker are built from the same tree by the same toolchain;
// kPsclusterCudaBackendAbiVersion guards against a library from another
// build. Bump it whenever Backend or these signatures change.
#ifndef PSCLUSTER_WORKER_CORE_CUDA_BACKEND_ABI_H_
#define PSCLUSTER_WORKER_CORE_CUDA_BACKEND_ABI_H_

#include <cstddef>

#include "worker/core/backend.h"

inline constexpr int kPsclusterCudaBackendAbiVersion = 3;
inline constexpr char kPsclusterCudaBackendAbiVersionSymbol[] = "PsclusterCudaBackendAbiVersion";
inline constexpr char kPsclusterCreateCudaBackendSymbol[] = "PsclusterCreateCudaBackend";

extern "C" {

// kPsclusterCudaBackendAbiVersion as the library was built.
int PsclusterCudaBackendAbiVersion(void);

// A new CUDA Backend on CUDA device `device` (the caller owns it and deletes
// it; the library must stay loaded while it lives). On failure returns nullptr and
// copies the reason, NUL-terminated and truncated to error_size bytes, into
// `error` (if not null). A library built without CUDA always fails, with a
// reason saying so.
pscluster::Backend* PsclusterCreateCudaBackend(int device, char* error, size_t error_size);

}  // extern "C"

#endif  // PSCLUSTER_WORKER_CORE_CUDA_BACKEND_ABI_H_
