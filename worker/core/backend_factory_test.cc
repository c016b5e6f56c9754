// Tests the run-time backend choice. On a machine without a CUDA device the
// cuda preference must fail with FAILED_PRECONDITION and auto must fall back
// to the CPU; with a device both must give the CUDA backend.
#include "worker/core/backend_factory.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/core/cuda_backend.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(BackendFactoryTest, CpuPreferenceGivesCpuBackend) {
  auto backend = CreateBackend(DevicePreference::kCpu);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu (OpenBLAS)");
}

TEST(BackendFactoryTest, CudaPreference) {
  std::string reason;
  const bool has_cuda = CudaDeviceCount(&reason) > 0;
  auto backend = CreateBackend(DevicePreference::kCuda);
  if (has_cuda) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_THAT((*backend)->name(), StartsWith("cuda:"));
  } else {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(backend.status().message()),
                HasSubstr("device: cuda requested but no CUDA device is available: "));
    EXPECT_THAT(std::string(backend.status().message()), HasSubstr(reason));
  }
}

TEST(BackendFactoryTest, AutoPrefersCudaAndFallsBackToCpu) {
  std::string reason;
  const bool has_cuda = CudaDeviceCount(&reason) > 0;
  auto backend = CreateBackend(DevicePreference::kAuto);
  ASSERT_TRUE(backend.ok()) << backend.status();
  if (has_cuda) {
    EXPECT_THAT((*backend)->name(), StartsWith("cuda:"));
  } else {
    EXPECT_EQ((*backend)->name(), "cpu (OpenBLAS)");
  }
}

}  // namespace
}  // namespace pscluster
