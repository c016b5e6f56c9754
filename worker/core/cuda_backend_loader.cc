// dlopen of libpscluster_cuda.so and of the CUDA driver; see
// cuda_backend_loader.h.
#include "worker/core/cuda_backend_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/core/cuda_backend_abi.h"

namespace pscluster {
namespace {

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The name of a driver API CUresult (cuGetErrorName), else its number.
std::string CuResultName(int code, void* driver) {
  using GetErrorNameFn = int (*)(int, const char**);
  auto get_name = reinterpret_cast<GetErrorNameFn>(dlsym(driver, "cuGetErrorName"));
  const char* name = nullptr;
  if (get_name != nullptr && get_name(code, &name) == 0 && name != nullptr) return name;
  return absl::StrCat("CUresult ", code);
}

}  // namespace

int ProbeCudaDevices(std::string* reason) {
  auto fail = [reason](std::string why) {
    if (reason != nullptr) *reason = std::move(why);
    return 0;
  };
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace. The
  // handle is kept (the driver is loaded once per process anyway).
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return fail(absl::StrCat("no CUDA driver (", DlError(), ")"));
  using CuInitFn = int (*)(unsigned int);
  using CuDeviceGetCountFn = int (*)(int*);
  auto cu_init = reinterpret_cast<CuInitFn>(dlsym(driver, "cuInit"));
  auto cu_count = reinterpret_cast<CuDeviceGetCountFn>(dlsym(driver, "cuDeviceGetCount"));
  if (cu_init == nullptr || cu_count == nullptr) {
    return fail("libcuda.so.1 has no cuInit/cuDeviceGetCount");
  }
  int rc = cu_init(0);
  if (rc != 0) return fail(absl::StrCat("cuInit: ", CuResultName(rc, driver)));
  int count = 0;
  rc = cu_count(&count);
  if (rc != 0) return fail(absl::StrCat("cuDeviceGetCount: ", CuResultName(rc, driver)));
  if (count == 0) return fail("cuDeviceGetCount: no CUDA device found");
  return count;
}

std::string DefaultCudaBackendLibraryPath() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    std::string dir(exe, static_cast<size_t>(n));
    dir.erase(dir.rfind('/') + 1);
    std::string candidate = dir + kCudaBackendLibraryName;
    if (FileExists(candidate)) return candidate;
  }
  return kCudaBackendLibraryName;
}

absl::StatusOr<CudaBackendLibrary> CudaBackendLibrary::Open(const std::string& path) {
  if (path.find('/') != std::string::npos && !FileExists(path)) {
    return absl::NotFoundError(
        absl::StrCat("CUDA backend library ", path, " not found: ", std::strerror(errno)));
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the CUDA backend library ", path, ": ", DlError()));
  }
  // Never dlclose: backends created by the library run its code.
  using VersionFn = int (*)();
  auto version = reinterpret_cast<VersionFn>(dlsym(handle, kPsclusterCudaBackendAbiVersionSymbol));
  auto create = reinterpret_cast<CreateFn>(dlsym(handle, kPsclusterCreateCudaBackendSymbol));
  if (version == nullptr || create == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a pscluster CUDA backend library (no ", kPsclusterCreateCudaBackendSymbol,
        " / ", kPsclusterCudaBackendAbiVersionSymbol, ")"));
  }
  if (version() != kPsclusterCudaBackendAbiVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is from another pscluster build (backend ABI version ", version(),
                     ", this worker needs ", kPsclusterCudaBackendAbiVersion, ")"));
  }
  return CudaBackendLibrary(path, create);
}

absl::StatusOr<std::unique_ptr<Backend>> CudaBackendLibrary::CreateBackend(int device) const {
  char error[1024] = {0};
  std::unique_ptr<Backend> backend(create_(device, error, sizeof(error)));
  if (backend == nullptr) {
    return absl::FailedPreconditionError(error[0] != '\0' ? std::string(error)
                                                          : "the CUDA backend failed to start");
  }
  return backend;
}

}  // namespace pscluster
