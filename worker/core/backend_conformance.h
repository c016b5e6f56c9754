// A conformance suite every Backend must pass: GEMM against a naive triple
// loop (all transpose combinations, odd sizes, alpha/beta), AddBias, Relu,
// ReluGrad, BiasGrad and SoftmaxCrossEntropy against hand-computed values and
// finite differences; and (backend_conformance_nn.cc) the conv-net ops:
// activations, regression losses, im2col/col2im, pooling, dropout and batch
// norm against direct definitions, adjoint identities and finite
// differences.
//
// Use it from a backend's test by instantiating the parameterised suite:
//
//   INSTANTIATE_TEST_SUITE_P(Cpu, BackendConformanceTest,
//       ::testing::Values(BackendFactory{"cpu", [](std::string*) {
//         return CreateCpuBackend(); }}),
//       BackendFactoryName);
//
// A factory that returns nullptr makes every test in the suite GTEST_SKIP
// with the reason it wrote (e.g. "no CUDA device").
//
// Test-only. Thread-safety: not applicable (gtest fixtures).
#ifndef PSCLUSTER_WORKER_CORE_BACKEND_CONFORMANCE_H_
#define PSCLUSTER_WORKER_CORE_BACKEND_CONFORMANCE_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "worker/core/backend.h"

namespace pscluster {

struct BackendFactory {
  std::string name;  // A valid gtest name: letters, digits, underscores.
  // Returns the backend under test, or nullptr with *skip_reason set.
  std::function<std::unique_ptr<Backend>(std::string* skip_reason)> create;
};

inline std::ostream& operator<<(std::ostream& os, const BackendFactory& f) {
  return os << f.name;
}

// Names instantiated tests after the factory.
std::string BackendFactoryName(const ::testing::TestParamInfo<BackendFactory>& info);

class BackendConformanceTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override;

  std::unique_ptr<Backend> backend_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_BACKEND_CONFORMANCE_H_
