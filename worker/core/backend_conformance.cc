// The Backend conformance suite; see backend_conformance.h.
#include "worker/core/backend_conformance.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// C = alpha * op(A) op(B) + beta * C in double, straight from the definition.
std::vector<float> NaiveGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                             float alpha, const std::vector<float>& a,
                             const std::vector<float>& b, float beta,
                             const std::vector<float>& c) {
  std::vector<float> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const float av = trans_a ? a[p * m + i] : a[i * k + p];
        const float bv = trans_b ? b[j * k + p] : b[p * n + j];
        sum += static_cast<double>(av) * bv;
      }
      const double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[i * n + j];
      out[i * n + j] = static_cast<float>(alpha * sum + prior);
    }
  }
  return out;
}

double MeanLoss(Backend* backend, int64_t rows, int64_t cols, const std::vector<float>& logits,
                const std::vector<int32_t>& labels) {
  double loss_sum = 0.0;
  int64_t correct = 0;
  backend->SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(), nullptr, &loss_sum,
                               &correct);
  return loss_sum / static_cast<double>(rows);
}

double MeanSigmoidLoss(Backend* backend, const std::vector<float>& logits,
                       const std::vector<int32_t>& labels) {
  double loss_sum = 0.0;
  int64_t correct = 0;
  const int64_t rows = static_cast<int64_t>(logits.size());
  backend->SigmoidCrossEntropy(rows, logits.data(), labels.data(), nullptr, &loss_sum, &correct);
  return loss_sum / static_cast<double>(rows);
}

}  // namespace

std::string BackendFactoryName(const ::testing::TestParamInfo<BackendFactory>& info) {
  return info.param.name;
}

void BackendConformanceTest::SetUp() {
  std::string reason;
  backend_ = GetParam().create(&reason);
  if (backend_ == nullptr) GTEST_SKIP() << "backend " << GetParam().name << ": " << reason;
}

TEST_P(BackendConformanceTest, GemmMatchesNaiveForAllTransposesAndSizes) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {4, 9, 1}, {64, 10, 100}};
  struct Scale {
    float alpha, beta;
  };
  const Scale scales[] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 1.0f}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0;
      const bool tb = (t & 2) != 0;
      for (const Scale& sc : scales) {
        SCOPED_TRACE(::testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k
                                          << " trans_a=" << ta << " trans_b=" << tb
                                          << " alpha=" << sc.alpha << " beta=" << sc.beta);
        const std::vector<float> a = RandomVector(s.m * s.k, seed++);
        const std::vector<float> b = RandomVector(s.k * s.n, seed++);
        std::vector<float> c = RandomVector(s.m * s.n, seed++);
        const std::vector<float> want =
            NaiveGemm(ta, tb, s.m, s.n, s.k, sc.alpha, a, b, sc.beta, c);
        backend_->Gemm(ta, tb, s.m, s.n, s.k, sc.alpha, a.data(), b.data(), sc.beta, c.data());
        EXPECT_THAT(c, Pointwise(FloatNear(2e-4f), want));
      }
    }
  }
}

TEST_P(BackendConformanceTest, GemmHandValues) {
  // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50].
  const float a[] = {1, 2, 3, 4};
  const float b[] = {5, 6, 7, 8};
  std::vector<float> c(4);
  backend_->Gemm(false, false, 2, 2, 2, 1.0f, a, b, 0.0f, c.data());
  EXPECT_THAT(c, ElementsAre(19, 22, 43, 50));
  // Aᵀ * B = [1 3; 2 4] * [5 6; 7 8] = [26 30; 38 44].
  backend_->Gemm(true, false, 2, 2, 2, 1.0f, a, b, 0.0f, c.data());
  EXPECT_THAT(c, ElementsAre(26, 30, 38, 44));
  // Non-square: [1 2 3] (1×3) times Bᵀ where B = [1 0 1; 0 1 0] (2×3) -> [4 2].
  const float row[] = {1, 2, 3};
  const float bt[] = {1, 0, 1, 0, 1, 0};
  std::vector<float> out(2);
  backend_->Gemm(false, true, 1, 2, 3, 1.0f, row, bt, 0.0f, out.data());
  EXPECT_THAT(out, ElementsAre(4, 2));
}

TEST_P(BackendConformanceTest, GemmWithZeroBetaIgnoresGarbageInC) {
  const std::vector<float> a = RandomVector(3 * 4, 7);
  const std::vector<float> b = RandomVector(4 * 5, 8);
  std::vector<float> c(15, std::numeric_limits<float>::quiet_NaN());
  backend_->Gemm(false, false, 3, 5, 4, 1.0f, a.data(), b.data(), 0.0f, c.data());
  const std::vector<float> want = NaiveGemm(false, false, 3, 5, 4, 1.0f, a, b, 0.0f, c);
  EXPECT_THAT(c, Pointwise(FloatNear(1e-5f), want));
}

TEST_P(BackendConformanceTest, GemmWithZeroKScalesC) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  const float unused = 0.0f;
  backend_->Gemm(false, false, 2, 3, 0, 1.0f, &unused, &unused, 2.0f, c.data());
  EXPECT_THAT(c, ElementsAre(2, 4, 6, 8, 10, 12));
}

TEST_P(BackendConformanceTest, AddBias) {
  std::vector<float> y = {1, 2, 3, 4, 5, 6};
  const float bias[] = {10, 20, 30};
  backend_->AddBias(2, 3, bias, y.data());
  EXPECT_THAT(y, ElementsAre(11, 22, 33, 14, 25, 36));
}

TEST_P(BackendConformanceTest, Relu) {
  std::vector<float> x = {-1.0f, 0.0f, 2.0f, -0.5f, 3.0f, -0.0f};
  backend_->Relu(static_cast<int64_t>(x.size()), x.data());
  EXPECT_THAT(x, ElementsAre(0, 0, 2, 0, 3, 0));
}

TEST_P(BackendConformanceTest, ReluOnLargeInput) {
  // More elements than one block of threads, to cover grid-stride loops.
  std::vector<float> x = RandomVector(100003, 3);
  std::vector<float> want = x;
  for (float& v : want) v = v > 0 ? v : 0;
  backend_->Relu(static_cast<int64_t>(x.size()), x.data());
  EXPECT_EQ(x, want);
}

TEST_P(BackendConformanceTest, ReluGrad) {
  const float y[] = {0, 1, 0, 2, 0.5f};
  std::vector<float> dy = {5, 6, 7, 8, -9};
  backend_->ReluGrad(5, y, dy.data());
  EXPECT_THAT(dy, ElementsAre(0, 6, 0, 8, -9));
}

TEST_P(BackendConformanceTest, BiasGradOverwritesDb) {
  const float dy[] = {1, 2, 3, 4, 5, 6};  // 3 rows × 2 cols
  std::vector<float> db = {100, 100};
  backend_->BiasGrad(3, 2, dy, db.data());
  EXPECT_THAT(db, ElementsAre(9, 12));
}

TEST_P(BackendConformanceTest, BiasGradManyRows) {
  const int64_t rows = 300, cols = 7;
  const std::vector<float> dy = RandomVector(rows * cols, 4);
  std::vector<float> db(cols);
  backend_->BiasGrad(rows, cols, dy.data(), db.data());
  for (int64_t c = 0; c < cols; ++c) {
    double want = 0;
    for (int64_t r = 0; r < rows; ++r) want += dy[r * cols + c];
    EXPECT_NEAR(db[c], want, 1e-4) << "column " << c;
  }
}

TEST_P(BackendConformanceTest, SoftmaxCrossEntropyOfUniformLogits) {
  const int64_t rows = 4, cols = 10;
  const std::vector<float> logits(rows * cols, 0.5f);
  const std::vector<int32_t> labels = {0, 3, 9, 0};
  std::vector<float> grad(rows * cols);
  double loss_sum = -1;
  int64_t correct = -1;
  backend_->SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(), grad.data(),
                                &loss_sum, &correct);
  EXPECT_NEAR(loss_sum, rows * std::log(10.0), 1e-6);
  // Ties go to the first maximum, column 0: rows 0 and 3 are "correct".
  EXPECT_EQ(correct, 2);
  for (int64_t r = 0; r < rows; ++r) {
    double row_sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const float want = (0.1f - (c == labels[r] ? 1.0f : 0.0f)) / rows;
      EXPECT_NEAR(grad[r * cols + c], want, 1e-6) << "row " << r << " col " << c;
      row_sum += grad[r * cols + c];
    }
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "row " << r;
  }
}

TEST_P(BackendConformanceTest, SoftmaxCrossEntropyHandValues) {
  const float logits[] = {1, 2, 3, /*row 1*/ 3, 1, 2};
  const int32_t labels[] = {2, 1};
  std::vector<float> grad(6);
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SoftmaxCrossEntropy(2, 3, logits, labels, grad.data(), &loss_sum, &correct);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(loss_sum, (lse - 3.0) + (lse - 1.0), 1e-6);
  EXPECT_EQ(correct, 1);
  EXPECT_NEAR(grad[0], std::exp(1.0 - lse) / 2, 1e-6);
  EXPECT_NEAR(grad[2], (std::exp(3.0 - lse) - 1) / 2, 1e-6);
  EXPECT_NEAR(grad[4], (std::exp(1.0 - lse) - 1) / 2, 1e-6);
}

TEST_P(BackendConformanceTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  const float logits[] = {1000, 0, /*row 1*/ 1000, 1000, /*row 2*/ -1000, -1000};
  const int32_t labels[] = {1, 0, 1};
  std::vector<float> grad(6);
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SoftmaxCrossEntropy(3, 2, logits, labels, grad.data(), &loss_sum, &correct);
  EXPECT_NEAR(loss_sum, 1000.0 + 2 * std::log(2.0), 1e-3);
  EXPECT_EQ(correct, 1);  // row 1 (tie -> column 0)
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
  EXPECT_NEAR(grad[0], 1.0 / 3, 1e-6);
  EXPECT_NEAR(grad[1], -1.0 / 3, 1e-6);
}

TEST_P(BackendConformanceTest, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  const int64_t rows = 5, cols = 7;
  std::vector<float> logits = RandomVector(rows * cols, 11, -2.0f, 2.0f);
  const std::vector<int32_t> labels = {0, 6, 3, 3, 1};
  std::vector<float> grad(rows * cols);
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(), grad.data(),
                                &loss_sum, &correct);
  // Without grad the loss is the same.
  EXPECT_NEAR(MeanLoss(backend_.get(), rows, cols, logits, labels), loss_sum / rows, 1e-12);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float x = logits[i];
    const float plus = x + 1e-2f;
    const float minus = x - 1e-2f;
    logits[i] = plus;
    const double up = MeanLoss(backend_.get(), rows, cols, logits, labels);
    logits[i] = minus;
    const double down = MeanLoss(backend_.get(), rows, cols, logits, labels);
    logits[i] = x;
    // Divide by the step actually taken in float.
    const double numeric = (up - down) / (static_cast<double>(plus) - minus);
    EXPECT_NEAR(grad[i], numeric, 1e-5) << "element " << i;
  }
}

TEST_P(BackendConformanceTest, SoftmaxCrossEntropyCountsCorrectRows) {
  const float logits[] = {0, 5, 1, /**/ 9, 1, 2, /**/ 0, 0, 3, /**/ 2, 1, 0};
  const int32_t labels[] = {1, 0, 0, 0};
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SoftmaxCrossEntropy(4, 3, logits, labels, nullptr, &loss_sum, &correct);
  EXPECT_EQ(correct, 3);
  EXPECT_GT(loss_sum, 0.0);
}

TEST_P(BackendConformanceTest, SigmoidCrossEntropyHandValues) {
  const float logits[] = {0.0f, 2.0f, -1.0f, 3.0f};
  const int32_t labels[] = {1, 1, 0, 0};
  std::vector<float> grad(4);
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SigmoidCrossEntropy(4, logits, labels, grad.data(), &loss_sum, &correct);
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const double want = -std::log(sigmoid(0)) - std::log(sigmoid(2)) -
                      std::log(1 - sigmoid(-1)) - std::log(1 - sigmoid(3));
  EXPECT_NEAR(loss_sum, want, 1e-6);
  // p >= 0.5 counts as positive: rows 0 (p = 0.5, label 1), 1 and 2 are right.
  EXPECT_EQ(correct, 3);
  EXPECT_NEAR(grad[0], (0.5 - 1) / 4, 1e-6);
  EXPECT_NEAR(grad[1], (sigmoid(2) - 1) / 4, 1e-6);
  EXPECT_NEAR(grad[2], sigmoid(-1) / 4, 1e-6);
  EXPECT_NEAR(grad[3], sigmoid(3) / 4, 1e-6);
}

TEST_P(BackendConformanceTest, SigmoidCrossEntropyGradientMatchesFiniteDifferences) {
  const int64_t rows = 9;
  std::vector<float> logits = RandomVector(rows, 21, -4.0f, 4.0f);
  const std::vector<int32_t> labels = {0, 1, 1, 0, 1, 0, 0, 1, 1};
  std::vector<float> grad(rows);
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SigmoidCrossEntropy(rows, logits.data(), labels.data(), grad.data(), &loss_sum,
                                &correct);
  EXPECT_NEAR(MeanSigmoidLoss(backend_.get(), logits, labels), loss_sum / rows, 1e-12);
  for (int64_t i = 0; i < rows; ++i) {
    const float x = logits[i];
    const float plus = x + 1e-2f;
    const float minus = x - 1e-2f;
    logits[i] = plus;
    const double up = MeanSigmoidLoss(backend_.get(), logits, labels);
    logits[i] = minus;
    const double down = MeanSigmoidLoss(backend_.get(), logits, labels);
    logits[i] = x;
    const double numeric = (up - down) / (static_cast<double>(plus) - minus);
    EXPECT_NEAR(grad[i], numeric, 1e-5) << "element " << i;
  }
}

TEST_P(BackendConformanceTest, SigmoidCrossEntropyIsFiniteForExtremeLogits) {
  const float logits[] = {1000.0f, -1000.0f, 1000.0f, -1000.0f, 80.0f, -80.0f};
  const int32_t labels[] = {1, 0, 0, 1, 1, 1};
  std::vector<float> grad(6);
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SigmoidCrossEntropy(6, logits, labels, grad.data(), &loss_sum, &correct);
  ASSERT_TRUE(std::isfinite(loss_sum));
  // Right and confident rows cost ~0; wrong ones cost |x|.
  EXPECT_NEAR(loss_sum, 1000.0 + 1000.0 + 80.0, 1e-3);
  EXPECT_EQ(correct, 3);
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
  EXPECT_NEAR(grad[0], 0.0, 1e-7);
  EXPECT_NEAR(grad[2], 1.0 / 6, 1e-6);
  EXPECT_NEAR(grad[3], -1.0 / 6, 1e-6);
  EXPECT_NEAR(grad[5], -1.0 / 6, 1e-6);
}

TEST_P(BackendConformanceTest, SigmoidCrossEntropyManyRows) {
  // More rows than one block of threads.
  const int64_t rows = 1000;
  const std::vector<float> logits = RandomVector(rows, 5, -6.0f, 6.0f);
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>(r % 3 == 0);
  double want = 0;
  int64_t want_correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[r])));
    want -= labels[r] == 1 ? std::log(p) : std::log(1 - p);
    if ((p >= 0.5) == (labels[r] == 1)) ++want_correct;
  }
  double loss_sum = 0;
  int64_t correct = 0;
  backend_->SigmoidCrossEntropy(rows, logits.data(), labels.data(), nullptr, &loss_sum,
                                &correct);
  EXPECT_NEAR(loss_sum, want, 1e-6 * rows);
  EXPECT_EQ(correct, want_correct);
}

TEST_P(BackendConformanceTest, EmptyInputsAreNoOps) {
  double loss_sum = -1;
  int64_t correct = -1;
  backend_->SoftmaxCrossEntropy(0, 10, nullptr, nullptr, nullptr, &loss_sum, &correct);
  EXPECT_EQ(loss_sum, 0.0);
  EXPECT_EQ(correct, 0);
  loss_sum = -1;
  correct = -1;
  backend_->SigmoidCrossEntropy(0, nullptr, nullptr, nullptr, &loss_sum, &correct);
  EXPECT_EQ(loss_sum, 0.0);
  EXPECT_EQ(correct, 0);
  backend_->Relu(0, nullptr);
  backend_->ReluGrad(0, nullptr, nullptr);
  backend_->AddBias(0, 3, nullptr, nullptr);
  backend_->Gemm(false, false, 0, 3, 4, 1.0f, nullptr, nullptr, 0.0f, nullptr);
  std::vector<float> db = {7, 7};
  backend_->BiasGrad(0, 2, nullptr, db.data());
  EXPECT_THAT(db, ElementsAre(0, 0));
}

}  // namespace pscluster
