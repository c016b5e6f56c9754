// Tests the run-time backend choice with the real libpscluster_cuda.so (a
// data dependency). On a machine without a CUDA device the cuda preference
// must fail with FAILED_PRECONDITION naming the reason and auto must fall
// back to the CPU; with a device both must give the CUDA backend.
#include "worker/core/backend_factory.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/core/cuda_backend_loader.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

BackendOptions RunfilesOptions() {
  BackendOptions options;
  options.cuda_library = std::string(std::getenv("TEST_SRCDIR")) + "/" +
                         std::getenv("TEST_WORKSPACE") + "/worker/" + kCudaBackendLibraryName;
  return options;
}

TEST(BackendFactoryTest, CpuPreferenceGivesCpuBackend) {
  auto backend = CreateBackend(DevicePreference::kCpu, RunfilesOptions());
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu (OpenBLAS)");
}

TEST(BackendFactoryTest, CudaPreference) {
  std::string reason;
  const bool has_gpu = ProbeCudaDevices(&reason) > 0;
  auto backend = CreateBackend(DevicePreference::kCuda, RunfilesOptions());
  if (has_gpu) {
    // A GPU machine with a CPU-only build (no toolkit) fails, saying so.
    if (!backend.ok() && absl::StrContains(backend.status().message(), "built without CUDA")) {
      GTEST_SKIP() << backend.status();
    }
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_THAT((*backend)->name(), StartsWith("cuda:"));
  } else {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr("device: cuda requested but no CUDA device is available: "));
    EXPECT_THAT(std::string(backend.status().message()), HasSubstr(reason));
    EXPECT_FALSE(reason.empty());
  }
}

TEST(BackendFactoryTest, AutoPrefersCudaAndFallsBackToCpu) {
  std::string reason;
  const bool has_gpu = ProbeCudaDevices(&reason) > 0;
  auto cuda = CreateBackend(DevicePreference::kCuda, RunfilesOptions());
  auto backend = CreateBackend(DevicePreference::kAuto, RunfilesOptions());
  ASSERT_TRUE(backend.ok()) << backend.status();
  if (has_gpu && cuda.ok()) {
    EXPECT_THAT((*backend)->name(), StartsWith("cuda:"));
  } else {
    EXPECT_EQ((*backend)->name(), "cpu (OpenBLAS)");
  }
}

// Without the library, auto still works (CPU) and cuda names the library.
TEST(BackendFactoryTest, MissingLibrary) {
  BackendOptions options;
  options.cuda_library = "/nonexistent/" + std::string(kCudaBackendLibraryName);
  auto backend = CreateBackend(DevicePreference::kAuto, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu (OpenBLAS)");

  auto cuda = CreateBackend(DevicePreference::kCuda, options);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string reason;
  if (ProbeCudaDevices(&reason) > 0) {
    EXPECT_THAT(std::string(cuda.status().message()),
                HasSubstr("the CUDA backend library is unavailable: "));
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr(options.cuda_library));
  } else {
    EXPECT_THAT(std::string(cuda.status().message()), HasSubstr(reason));
  }
}

}  // namespace
}  // namespace pscluster
