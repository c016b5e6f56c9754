// libpscluster_cuda.so's entry points (cuda_backend_abi.h) over
// CreateCudaBackend (cuda_backend.h).
#include "worker/core/cuda_backend_abi.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "worker/core/cuda_backend.h"

extern "C" {

int PsclusterCudaBackendAbiVersion(void) { return kPsclusterCudaBackendAbiVersion; }

pscluster::Backend* PsclusterCreateCudaBackend(int device, char* error, size_t error_size) {
  std::string reason;
  std::unique_ptr<pscluster::Backend> backend = pscluster::CreateCudaBackend(&reason, device);
  if (backend == nullptr && error != nullptr && error_size > 0) {
    const size_t n = std::min(reason.size(), error_size - 1);
    std::memcpy(error, reason.data(), n);
    error[n] = '\0';
  }
  return backend.release();
}

}  // extern "C"
