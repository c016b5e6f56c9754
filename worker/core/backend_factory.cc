// Run-time choice of CPU or CUDA backend; see backend_factory.h.
#include "worker/core/backend_factory.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/cuda_backend.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(DevicePreference preference) {
  switch (preference) {
    case DevicePreference::kCpu:
      return CreateCpuBackend();
    case DevicePreference::kCuda: {
      std::string error;
      std::unique_ptr<Backend> cuda = CreateCudaBackend(&error);
      if (cuda == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "device: cuda requested but no CUDA device is available: ", error));
      }
      return cuda;
    }
    case DevicePreference::kAuto: {
      std::string error;
      std::unique_ptr<Backend> cuda = CreateCudaBackend(&error);
      if (cuda != nullptr) return cuda;
      return CreateCpuBackend();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device preference ", static_cast<int>(preference)));
}

}  // namespace pscluster
