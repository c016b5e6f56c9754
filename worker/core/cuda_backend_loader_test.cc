// Tests loading libpscluster_cuda.so (a data dependency) with dlopen: the
// GPU probe, a missing or wrong library, and creating the backend (which
// fails, naming why, on a machine without a GPU or in a CPU-only build).
#include "worker/core/cuda_backend_loader.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string RunfilesLibrary() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") +
         "/worker/" + kCudaBackendLibraryName;
}

TEST(CudaBackendLoaderTest, ProbeGivesCountOrReason) {
  std::string reason;
  const int count = ProbeCudaDevices(&reason);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(reason.empty());
  }
}

TEST(CudaBackendLoaderTest, MissingLibraryIsNotFound) {
  const std::string path = "/nonexistent/dir/" + std::string(kCudaBackendLibraryName);
  auto library = CudaBackendLibrary::Open(path);
  EXPECT_EQ(library.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(library.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(library.status().message()), HasSubstr("not found"));
}

TEST(CudaBackendLoaderTest, UnknownBareNameFailsToLoad) {
  auto library = CudaBackendLibrary::Open("libpscluster_no_such_library.so");
  EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(library.status().message()),
              HasSubstr("cannot load the CUDA backend library libpscluster_no_such_library.so"));
}

TEST(CudaBackendLoaderTest, LibraryWithoutEntryPointsIsRejected) {
  // Any shared library without the entry points, e.g. the C library.
  auto library = CudaBackendLibrary::Open("libc.so.6");
  EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(library.status().message()),
              HasSubstr("is not a pscluster CUDA backend library"));
}

TEST(CudaBackendLoaderTest, CreatesCudaBackendOrSaysWhyNot) {
  auto library = CudaBackendLibrary::Open(RunfilesLibrary());
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_EQ(library->path(), RunfilesLibrary());
  std::string reason;
  const bool has_gpu = ProbeCudaDevices(&reason) > 0;
  auto backend = library->CreateBackend();
  if (backend.ok()) {
    EXPECT_TRUE(has_gpu);
    EXPECT_THAT((*backend)->name(), StartsWith("cuda:"));
    return;
  }
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(backend.status().message()), Not(HasSubstr("failed to start")));
  if (has_gpu) {
    // Only a CPU-only build may fail on a GPU machine.
    EXPECT_THAT(std::string(backend.status().message()), HasSubstr("built without CUDA"));
  }
}

TEST(CudaBackendLoaderTest, DefaultPathIsNextToExecutableOrBareName) {
  const std::string path = DefaultCudaBackendLibraryPath();
  EXPECT_TRUE(path == kCudaBackendLibraryName ||
              absl::EndsWith(path, std::string("/") + kCudaBackendLibraryName))
      << path;
}

}  // namespace
}  // namespace pscluster
