// CPU implementation of Backend; see cpu_backend.h. GEMM and the dense-layer
// ops are here; the conv-net ops are in cpu_kernels.cc.
#include "worker/core/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "worker/core/cpu_kernels.h"

namespace pscluster {
namespace {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu (OpenBLAS)"; }

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    if (m == 0 || n == 0) return;
    // Leading dimensions of the stored (row-major) matrices; BLAS wants >= 1
    // even when k == 0.
    const int64_t lda = std::max<int64_t>(1, trans_a ? m : k);
    const int64_t ldb = std::max<int64_t>(1, trans_b ? k : n);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                beta, c, static_cast<int>(n));
  }

  void AddBias(int64_t rows, int64_t cols, const float* bias, float* y) override {
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }

  void Relu(int64_t n, float* x) override {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }

  void ReluGrad(int64_t n, const float* y, float* dy) override {
    for (int64_t i = 0; i < n; ++i) {
      if (!(y[i] > 0.0f)) dy[i] = 0.0f;
    }
  }

  void BiasGrad(int64_t rows, int64_t cols, const float* dy, float* db) override {
    std::fill(db, db + cols, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * cols;
      for (int64_t c = 0; c < cols; ++c) db[c] += row[c];
    }
  }

  void SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits,
                           const int32_t* labels, float* grad, double* loss_sum,
                           int64_t* correct) override {
    double total = 0.0;
    int64_t hits = 0;
    const float inv_rows = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = logits + r * cols;
      const int32_t label = labels[r];
      if (label < 0 || label >= cols) {
        std::fprintf(stderr,
                     "CpuBackend::SoftmaxCrossEntropy: label %d of row %lld is outside [0, %lld)\n",
                     label, static_cast<long long>(r), static_cast<long long>(cols));
        std::abort();
      }
      int64_t argmax = 0;
      for (int64_t c = 1; c < cols; ++c) {
        if (x[c] > x[argmax]) argmax = c;
      }
      const float max = x[argmax];
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(x[c] - max));
      total += std::log(sum) + static_cast<double>(max) - static_cast<double>(x[label]);
      if (argmax == label) ++hits;
      if (grad != nullptr) {
        float* g = grad + r * cols;
        const double inv_sum = 1.0 / sum;
        for (int64_t c = 0; c < cols; ++c) {
          const float p = static_cast<float>(std::exp(static_cast<double>(x[c] - max)) * inv_sum);
          g[c] = (p - (c == label ? 1.0f : 0.0f)) * inv_rows;
        }
      }
    }
    *loss_sum = total;
    *correct = hits;
  }

  void SigmoidCrossEntropy(int64_t rows, const float* logits, const int32_t* labels, float* grad,
                           double* loss_sum, int64_t* correct) override {
    double total = 0.0;
    int64_t hits = 0;
    const float inv_rows = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t label = labels[r];
      if (label != 0 && label != 1) {
        std::fprintf(stderr,
                     "CpuBackend::SigmoidCrossEntropy: label %d of row %lld is not 0 or 1\n",
                     label, static_cast<long long>(r));
        std::abort();
      }
      const double x = logits[r];
      total += std::max(x, 0.0) - x * label + std::log1p(std::exp(-std::fabs(x)));
      // sigmoid(x) >= 0.5 exactly when x >= 0.
      if ((x >= 0.0) == (label == 1)) ++hits;
      if (grad != nullptr) {
        // Stable sigmoid: never exponentiates a positive number.
        const double e = std::exp(-std::fabs(x));
        const double p = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
        grad[r] = static_cast<float>(p - label) * inv_rows;
      }
    }
    *loss_sum = total;
    *correct = hits;
  }

  // The conv-net ops: loops in cpu_kernels.cc.
  void Activate(ActivationFn f, int64_t n, const float* x, float* y) override {
    cpu::Activate(f, n, x, y);
  }
  void ActivateGrad(ActivationFn f, int64_t n, const float* x, const float* y,
                    float* dy) override {
    cpu::ActivateGrad(f, n, x, y, dy);
  }
  void RegressionLoss(RegressionLossFn f, float delta, int64_t rows, int64_t cols,
                      const float* outputs, const int32_t* labels, float* grad, double* loss_sum,
                      int64_t* correct) override {
    cpu::RegressionLoss(f, delta, rows, cols, outputs, labels, grad, loss_sum, correct);
  }
  void Im2Col(const Window2d& g, const float* x, float* cols) override { cpu::Im2Col(g, x, cols); }
  void Col2Im(const Window2d& g, const float* cols, float* dx) override {
    cpu::Col2Im(g, cols, dx);
  }
  void MaxPool(const Window2d& g, const float* x, float* y, int32_t* argmax) override {
    cpu::MaxPool(g, x, y, argmax);
  }
  void MaxPoolGrad(const Window2d& g, const float* dy, const int32_t* argmax,
                   float* dx) override {
    cpu::MaxPoolGrad(g, dy, argmax, dx);
  }
  void AvgPool(const Window2d& g, const float* x, float* y) override { cpu::AvgPool(g, x, y); }
  void AvgPoolGrad(const Window2d& g, const float* dy, float* dx) override {
    cpu::AvgPoolGrad(g, dy, dx);
  }
  void Dropout(int64_t n, float rate, uint64_t seed, const float* x, float* y,
               float* mask) override {
    cpu::Dropout(n, rate, seed, x, y, mask);
  }
  void Multiply(int64_t n, const float* a, float* y) override { cpu::Multiply(n, a, y); }
  void BatchNormTrain(int64_t rows, int64_t channels, const float* x, const float* gamma,
                      const float* beta, float epsilon, float* y, float* xhat, float* mean,
                      float* var, float* inv_std) override {
    cpu::BatchNormTrain(rows, channels, x, gamma, beta, epsilon, y, xhat, mean, var, inv_std);
  }
  void BatchNormInfer(int64_t rows, int64_t channels, const float* x, const float* gamma,
                      const float* beta, const float* mean, const float* var, float epsilon,
                      float* y) override {
    cpu::BatchNormInfer(rows, channels, x, gamma, beta, mean, var, epsilon, y);
  }
  void BatchNormGrad(int64_t rows, int64_t channels, const float* xhat, const float* gamma,
                     const float* inv_std, const float* dy, float* dx, float* dgamma,
                     float* dbeta) override {
    cpu::BatchNormGrad(rows, channels, xhat, gamma, inv_std, dy, dx, dgamma, dbeta);
  }
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

void SetCpuComputeThreads(int n) {
  if (n >= 1) openblas_set_num_threads(n);
}

}  // namespace pscluster
