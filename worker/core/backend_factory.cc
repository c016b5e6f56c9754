// Run-time choice of CPU or CUDA backend; see backend_factory.h.
#include "worker/core/backend_factory.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/cuda_backend_loader.h"

namespace pscluster {
namespace {

// The CUDA backend through libpscluster_cuda.so; FAILED_PRECONDITION with
// the message backend_factory.h documents for kCuda.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackendFromLibrary(
    const BackendOptions& options) {
  constexpr char kPrefix[] = "device: cuda requested but ";
  std::string reason;
  const int gpus = ProbeCudaDevices(&reason);
  if (gpus == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kPrefix, "no CUDA device is available: ", reason));
  }
  const std::string path =
      options.cuda_library.empty() ? DefaultCudaBackendLibraryPath() : options.cuda_library;
  absl::StatusOr<CudaBackendLibrary> library = CudaBackendLibrary::Open(path);
  if (!library.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        kPrefix, "the CUDA backend library is unavailable: ", library.status().message()));
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      library->CreateBackend(std::max(options.cuda_device, 0) % gpus);
  if (!backend.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kPrefix, "the CUDA backend could not start: ", backend.status().message()));
  }
  return backend;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(DevicePreference preference,
                                                       const BackendOptions& options) {
  switch (preference) {
    case DevicePreference::kCpu:
      return CreateCpuBackend();
    case DevicePreference::kCuda:
      return CreateCudaBackendFromLibrary(options);
    case DevicePreference::kAuto: {
      absl::StatusOr<std::unique_ptr<Backend>> cuda = CreateCudaBackendFromLibrary(options);
      if (cuda.ok()) return cuda;
      return CreateCpuBackend();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device preference ", static_cast<int>(preference)));
}

}  // namespace pscluster
