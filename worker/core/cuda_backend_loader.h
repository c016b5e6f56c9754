// Loads the CUDA backend from libpscluster_cuda.so at run time, so that the
// worker (and psctl, which can train in process) link no CUDA library: the
// library and, through it, cudart and cuBLAS are loaded with dlopen only when
// a job asks for `device: cuda|auto` on a machine with a GPU. The GPU check
// itself dlopens the driver (libcuda.so.1), never the toolkit.
//
// The library is never unloaded: the backends it creates run its code.
//
// Thread-safety: everything here may be called from any thread (dlopen and
// dlsym are thread-safe, and opening a loaded library again is cheap).
#ifndef PSCLUSTER_WORKER_CORE_CUDA_BACKEND_LOADER_H_
#define PSCLUSTER_WORKER_CORE_CUDA_BACKEND_LOADER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/core/backend.h"

namespace pscluster {

// The file name of the CUDA backend library (//worker:libpscluster_cuda.so).
inline constexpr char kCudaBackendLibraryName[] = "libpscluster_cuda.so";

// Number of CUDA devices the driver reports, found through dlopen of
// "libcuda.so.1" + cuInit + cuDeviceGetCount (no CUDA library is linked).
// Returns 0 and sets *reason (if not null) when there is none, e.g. "no CUDA
// driver (libcuda.so.1: cannot open shared object file ...)" or
// "cuInit: CUDA_ERROR_NO_DEVICE".
int ProbeCudaDevices(std::string* reason);

// Where the worker looks for the library when none is given: the file
// kCudaBackendLibraryName in the directory of the running executable if it
// exists there, else the bare name (the dynamic linker's search path:
// LD_LIBRARY_PATH, ld.so.cache).
std::string DefaultCudaBackendLibraryPath();

// libpscluster_cuda.so, loaded. A small value: copies share the one loaded
// library.
class CudaBackendLibrary {
 public:
  // dlopens `path` (a path with a '/', or a bare name for the linker's
  // search path) and checks its entry points (cuda_backend_abi.h). Errors:
  // NOT_FOUND when `path` names a file that does not exist; FAILED_PRECONDITION
  // when dlopen fails (e.g. the library cannot find libcudart), an entry
  // point is missing, or the library is from another build (ABI version).
  // Every message names the path.
  static absl::StatusOr<CudaBackendLibrary> Open(const std::string& path);

  // A new CUDA Backend on CUDA device `device`. FAILED_PRECONDITION with the library's
  // reason when there is no usable device or the library was built without
  // CUDA ("pscluster was built without CUDA ...").
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(int device = 0) const;

  const std::string& path() const { return path_; }

 private:
  using CreateFn = Backend* (*)(int device, char* error, size_t error_size);
  CudaBackendLibrary(std::string path, CreateFn create) : path_(std::move(path)), create_(create) {}

  std::string path_;
  CreateFn create_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_CUDA_BACKEND_LOADER_H_
