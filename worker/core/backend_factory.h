// Chooses the worker's compute Backend from the job spec's `device:` field.
// The CUDA backend lives in libpscluster_cuda.so and is loaded only when a
// job asks for it and a GPU exists (cuda_backend_loader.h), so binaries that
// use this factory link no CUDA library.
//
// Thread-safety: CreateBackend may be called from any thread; each call
// returns a new Backend that is then owned by (and used from) one thread.
#ifndef PSCLUSTER_WORKER_CORE_BACKEND_FACTORY_H_
#define PSCLUSTER_WORKER_CORE_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "worker/core/backend.h"

namespace pscluster {

struct BackendOptions {
  // Path of libpscluster_cuda.so. Empty (the default):
  // DefaultCudaBackendLibraryPath(), i.e. next to the running executable,
  // else the dynamic linker's search path.
  std::string cuda_library;
  // Which GPU a CUDA backend runs on: this index modulo the GPUs visible (a
  // worker's `devices` replicas take 0, 1, ... and so spread over them).
  int cuda_device = 0;
};

// kCpu  -> the OpenBLAS backend.
// kCuda -> the CUDA backend on GPU options.cuda_device mod the GPUs visible,
//          or FAILED_PRECONDITION naming why:
//          "device: cuda requested but no CUDA device is available: <reason>"
//          (no driver or no device), "... but the CUDA backend library is
//          unavailable: <reason>" (missing or broken libpscluster_cuda.so), or
//          "... but the CUDA backend could not start: <reason>" (including a
//          library built without CUDA).
// kAuto -> CUDA when a usable device and the library exist, otherwise the
//          CPU backend (its name() says which one was chosen).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(DevicePreference preference,
                                                       const BackendOptions& options = {});

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_BACKEND_FACTORY_H_
