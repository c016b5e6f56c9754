// Runs the Backend conformance suite on the CUDA backend and compares it with
// the CPU backend on realistic sizes. Every test skips cleanly on a machine
// without a CUDA device or driver.
#include "worker/core/cuda_backend.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/core/backend_conformance.h"
#include "worker/core/cpu_backend.h"

namespace pscluster {
namespace {

using ::testing::FloatNear;
using ::testing::Pointwise;
using ::testing::StartsWith;

INSTANTIATE_TEST_SUITE_P(Cuda, BackendConformanceTest,
                         ::testing::Values(BackendFactory{"cuda",
                                                          [](std::string* reason) {
                                                            return CreateCudaBackend(reason);
                                                          }}),
                         BackendFactoryName);

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    cuda_ = CreateCudaBackend(&reason);
    if (cuda_ == nullptr) GTEST_SKIP() << "no CUDA device: " << reason;
    cpu_ = CreateCpuBackend();
  }

  std::unique_ptr<Backend> cuda_;
  std::unique_ptr<Backend> cpu_;
};

TEST(CudaBackendTest, DeviceCountAndCreateAgree) {
  std::string count_error;
  const int count = CudaDeviceCount(&count_error);
  std::string create_error;
  std::unique_ptr<Backend> backend = CreateCudaBackend(&create_error);
  if (count == 0) {
    EXPECT_FALSE(count_error.empty());
    EXPECT_EQ(backend, nullptr);
    EXPECT_FALSE(create_error.empty());
  } else {
    ASSERT_NE(backend, nullptr) << create_error;
    EXPECT_THAT(backend->name(), StartsWith("cuda:"));
    EXPECT_GT(backend->name().size(), 5u);
  }
}

// An MLP-sized forward and backward step (batch 64, 784 -> 256 -> 10) on both
// backends; the results must agree.
TEST_F(CudaVsCpuTest, MlpStepAgreesWithCpu) {
  const int64_t batch = 64, in = 784, hidden = 256, out = 10;
  const std::vector<float> x = RandomVector(batch * in, 1);
  const std::vector<float> w1 = RandomVector(in * hidden, 2);
  const std::vector<float> b1 = RandomVector(hidden, 3);
  const std::vector<float> w2 = RandomVector(hidden * out, 4);
  const std::vector<float> b2 = RandomVector(out, 5);
  std::vector<int32_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>((i * 7) % out);

  struct Result {
    std::vector<float> h, logits, dlogits, dw2, db2, dh, dw1, db1;
    double loss = 0;
    int64_t correct = 0;
  };
  auto run = [&](Backend* be) {
    Result r;
    r.h.resize(batch * hidden);
    r.logits.resize(batch * out);
    r.dlogits.resize(batch * out);
    r.dw2.resize(hidden * out);
    r.db2.resize(out);
    r.dh.resize(batch * hidden);
    r.dw1.resize(in * hidden);
    r.db1.resize(hidden);
    be->Gemm(false, false, batch, hidden, in, 1.0f, x.data(), w1.data(), 0.0f, r.h.data());
    be->AddBias(batch, hidden, b1.data(), r.h.data());
    be->Relu(batch * hidden, r.h.data());
    be->Gemm(false, false, batch, out, hidden, 1.0f, r.h.data(), w2.data(), 0.0f,
             r.logits.data());
    be->AddBias(batch, out, b2.data(), r.logits.data());
    be->SoftmaxCrossEntropy(batch, out, r.logits.data(), labels.data(), r.dlogits.data(),
                            &r.loss, &r.correct);
    be->Gemm(true, false, hidden, out, batch, 1.0f, r.h.data(), r.dlogits.data(), 0.0f,
             r.dw2.data());
    be->BiasGrad(batch, out, r.dlogits.data(), r.db2.data());
    be->Gemm(false, true, batch, hidden, out, 1.0f, r.dlogits.data(), w2.data(), 0.0f,
             r.dh.data());
    be->ReluGrad(batch * hidden, r.h.data(), r.dh.data());
    be->Gemm(true, false, in, hidden, batch, 1.0f, x.data(), r.dh.data(), 0.0f, r.dw1.data());
    be->BiasGrad(batch, hidden, r.dh.data(), r.db1.data());
    return r;
  };
  const Result want = run(cpu_.get());
  const Result got = run(cuda_.get());
  EXPECT_THAT(got.h, Pointwise(FloatNear(1e-3f), want.h));
  EXPECT_THAT(got.logits, Pointwise(FloatNear(1e-2f), want.logits));
  EXPECT_NEAR(got.loss, want.loss, 1e-3 * batch);
  EXPECT_EQ(got.correct, want.correct);
  EXPECT_THAT(got.dlogits, Pointwise(FloatNear(1e-4f), want.dlogits));
  EXPECT_THAT(got.dw2, Pointwise(FloatNear(1e-3f), want.dw2));
  EXPECT_THAT(got.db2, Pointwise(FloatNear(1e-4f), want.db2));
  EXPECT_THAT(got.dw1, Pointwise(FloatNear(1e-3f), want.dw1));
  EXPECT_THAT(got.db1, Pointwise(FloatNear(1e-4f), want.db1));
}

// Scratch buffers grow between calls of different sizes and stay correct.
TEST_F(CudaVsCpuTest, ScratchBuffersGrowAcrossCalls) {
  for (int64_t n : {10, 100000, 7, 300000}) {
    std::vector<float> a = RandomVector(n, static_cast<uint32_t>(n));
    std::vector<float> b = a;
    cpu_->Relu(n, a.data());
    cuda_->Relu(n, b.data());
    EXPECT_EQ(a, b) << "n=" << n;
  }
}

}  // namespace
}  // namespace pscluster
