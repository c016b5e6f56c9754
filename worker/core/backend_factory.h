// Chooses the worker's compute Backend from the job spec's `device:` field.
//
// Thread-safety: CreateBackend may be called from any thread; each call
// returns a new Backend that is then owned by (and used from) one thread.
#ifndef PSCLUSTER_WORKER_CORE_BACKEND_FACTORY_H_
#define PSCLUSTER_WORKER_CORE_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "worker/core/backend.h"

namespace pscluster {

// kCpu  -> the OpenBLAS backend.
// kCuda -> the CUDA backend on device 0, or FAILED_PRECONDITION
//          "device: cuda requested but no CUDA device is available: <reason>".
// kAuto -> CUDA when a usable device exists, otherwise the CPU backend.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(DevicePreference preference);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_BACKEND_FACTORY_H_
