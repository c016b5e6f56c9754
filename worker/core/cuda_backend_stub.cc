// The CUDA backend of a build without a CUDA toolkit (third_party/cuda.bzl
// compiles this file instead of cuda_backend.cu): no device, and a reason
// that says so.
#include <memory>
#include <string>

#include "worker/core/backend.h"
#include "worker/core/cuda_backend.h"

namespace pscluster {

namespace {
constexpr char kBuiltWithoutCuda[] =
    "pscluster was built without CUDA (no CUDA toolkit at build time; see docs/build.md)";
}  // namespace

int CudaDeviceCount(std::string* error) {
  if (error != nullptr) *error = kBuiltWithoutCuda;
  return 0;
}

std::unique_ptr<Backend> CreateCudaBackend(std::string* error, int /*device*/) {
  if (error != nullptr) *error = kBuiltWithoutCuda;
  return nullptr;
}

}  // namespace pscluster
