// Runs the Backend conformance suite on the CPU (OpenBLAS) backend.
#include "worker/core/cpu_backend.h"

#include <string>

#include "gtest/gtest.h"
#include "worker/core/backend_conformance.h"

namespace pscluster {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, BackendConformanceTest,
                         ::testing::Values(BackendFactory{
                             "cpu", [](std::string*) { return CreateCpuBackend(); }}),
                         BackendFactoryName);

TEST(CpuBackendTest, Name) { EXPECT_EQ(CreateCpuBackend()->name(), "cpu (OpenBLAS)"); }

}  // namespace
}  // namespace pscluster
