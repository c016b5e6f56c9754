// CUDA implementation of Backend; see cuda_backend.h for the contract, the
// per-call host<->device copies and the abort-on-CUDA-failure policy.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker/core/backend.h"
#include "worker/core/cuda_backend.h"
#include "worker/core/cuda_nn_kernels.cuh"

namespace pscluster {
namespace {

// Failures after initialisation: see cuda_backend.h ("Errors").
#define PS_CUDA_CHECK(expr)                                                           \
  do {                                                                                \
    const cudaError_t ps_err_ = (expr);                                               \
    if (ps_err_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s:%d: CUDA call failed: %s: %s\n", __FILE__, __LINE__,   \
                   #expr, cudaGetErrorString(ps_err_));                               \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

#define PS_CUBLAS_CHECK(expr)                                                         \
  do {                                                                                \
    const cublasStatus_t ps_st_ = (expr);                                             \
    if (ps_st_ != CUBLAS_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "%s:%d: cuBLAS call failed: %s: %s\n", __FILE__, __LINE__, \
                   #expr, cublasGetStatusString(ps_st_));                             \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(b, 1), 65535));
}

// Kernels use grid-stride loops so any n works with a capped grid.
__global__ void AddBiasKernel(int64_t rows, int64_t cols, const float* bias, float* y) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

__global__ void ReluKernel(int64_t n, float* x) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void ReluGradKernel(int64_t n, const float* y, float* dy) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (!(y[i] > 0.0f)) dy[i] = 0.0f;
  }
}

// One thread per column; neighbouring threads read neighbouring addresses.
__global__ void BiasGradKernel(int64_t rows, int64_t cols, const float* dy, float* db) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
    db[c] = sum;
  }
}

// One thread per row. Writes the row's loss and whether its argmax is right;
// the host sums them (deterministic, no atomics).
__global__ void SoftmaxCrossEntropyKernel(int64_t rows, int64_t cols, const float* logits,
                                          const int32_t* labels, float* grad, double* row_loss,
                                          int32_t* row_correct) {
  const float inv_rows = 1.0f / static_cast<float>(rows);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const float* x = logits + r * cols;
    const int32_t label = labels[r];
    int64_t argmax = 0;
    for (int64_t c = 1; c < cols; ++c) {
      if (x[c] > x[argmax]) argmax = c;
    }
    const float max = x[argmax];
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += exp(static_cast<double>(x[c] - max));
    row_loss[r] = log(sum) + static_cast<double>(max) - static_cast<double>(x[label]);
    row_correct[r] = argmax == label ? 1 : 0;
    if (grad != nullptr) {
      float* g = grad + r * cols;
      const double inv_sum = 1.0 / sum;
      for (int64_t c = 0; c < cols; ++c) {
        const float p = static_cast<float>(exp(static_cast<double>(x[c] - max)) * inv_sum);
        g[c] = (p - (c == label ? 1.0f : 0.0f)) * inv_rows;
      }
    }
  }
}

// One thread per row, as SoftmaxCrossEntropyKernel; see Backend for the math.
__global__ void SigmoidCrossEntropyKernel(int64_t rows, const float* logits,
                                          const int32_t* labels, float* grad, double* row_loss,
                                          int32_t* row_correct) {
  const float inv_rows = 1.0f / static_cast<float>(rows);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const double x = logits[r];
    const int32_t label = labels[r];
    const double e = exp(-fabs(x));
    row_loss[r] = fmax(x, 0.0) - x * label + log1p(e);
    row_correct[r] = (x >= 0.0) == (label == 1) ? 1 : 0;
    if (grad != nullptr) {
      const double p = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      grad[r] = static_cast<float>(p - label) * inv_rows;
    }
  }
}

// A grow-only device allocation, reused across calls.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);  // Errors ignored at teardown.
  }

  template <typename T>
  T* Get(int64_t count) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T);
    if (bytes > bytes_) {
      if (ptr_ != nullptr) PS_CUDA_CHECK(cudaFree(ptr_));
      ptr_ = nullptr;
      bytes_ = 0;
      PS_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
      bytes_ = bytes;
    }
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackend : public Backend {
 public:
  CudaBackend(int device, std::string device_name, cudaStream_t stream, cublasHandle_t cublas)
      : device_(device), name_("cuda:" + device_name), stream_(stream), cublas_(cublas) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    if (m == 0 || n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_a = buf_[0].Get<float>(m * k);
    float* d_b = buf_[1].Get<float>(k * n);
    float* d_c = buf_[2].Get<float>(m * n);
    ToDevice(d_a, a, m * k);
    ToDevice(d_b, b, k * n);
    if (beta != 0.0f) ToDevice(d_c, c, m * n);
    // cuBLAS is column-major. A row-major r×s matrix is the column-major s×r
    // matrix of its transpose, so compute Cᵀ (n×m) = op(B)ᵀ · op(A)ᵀ, passing
    // B first; each operand keeps its own transpose flag.
    const int lda = static_cast<int>(std::max<int64_t>(1, trans_a ? m : k));
    const int ldb = static_cast<int>(std::max<int64_t>(1, trans_b ? k : n));
    PS_CUBLAS_CHECK(cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), static_cast<int>(k), &alpha, d_b, ldb, d_a,
                                lda, &beta, d_c, static_cast<int>(n)));
    ToHost(c, d_c, m * n);
    Sync();
  }

  void AddBias(int64_t rows, int64_t cols, const float* bias, float* y) override {
    if (rows == 0 || cols == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_bias = buf_[0].Get<float>(cols);
    float* d_y = buf_[1].Get<float>(rows * cols);
    ToDevice(d_bias, bias, cols);
    ToDevice(d_y, y, rows * cols);
    AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, stream_>>>(rows, cols, d_bias, d_y);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(y, d_y, rows * cols);
    Sync();
  }

  void Relu(int64_t n, float* x) override {
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = buf_[0].Get<float>(n);
    ToDevice(d_x, x, n);
    ReluKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, d_x);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(x, d_x, n);
    Sync();
  }

  void ReluGrad(int64_t n, const float* y, float* dy) override {
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_y = buf_[0].Get<float>(n);
    float* d_dy = buf_[1].Get<float>(n);
    ToDevice(d_y, y, n);
    ToDevice(d_dy, dy, n);
    ReluGradKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, d_y, d_dy);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(dy, d_dy, n);
    Sync();
  }

  void BiasGrad(int64_t rows, int64_t cols, const float* dy, float* db) override {
    if (cols == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_dy = buf_[0].Get<float>(rows * cols);
    float* d_db = buf_[1].Get<float>(cols);
    ToDevice(d_dy, dy, rows * cols);
    BiasGradKernel<<<Blocks(cols), kThreads, 0, stream_>>>(rows, cols, d_dy, d_db);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(db, d_db, cols);
    Sync();
  }

  void SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits,
                           const int32_t* labels, float* grad, double* loss_sum,
                           int64_t* correct) override {
    *loss_sum = 0.0;
    *correct = 0;
    if (rows == 0) return;
    // Validate on the host: a kernel cannot report a bad label usefully.
    for (int64_t r = 0; r < rows; ++r) {
      if (labels[r] < 0 || labels[r] >= cols) {
        std::fprintf(stderr,
                     "CudaBackend::SoftmaxCrossEntropy: label %d of row %lld is outside "
                     "[0, %lld)\n",
                     labels[r], static_cast<long long>(r), static_cast<long long>(cols));
        std::abort();
      }
    }
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_logits = buf_[0].Get<float>(rows * cols);
    int32_t* d_labels = buf_[1].Get<int32_t>(rows);
    float* d_grad = grad != nullptr ? buf_[2].Get<float>(rows * cols) : nullptr;
    double* d_loss = buf_[3].Get<double>(rows);
    int32_t* d_correct = buf_[4].Get<int32_t>(rows);
    ToDevice(d_logits, logits, rows * cols);
    ToDevice(d_labels, labels, rows);
    SoftmaxCrossEntropyKernel<<<Blocks(rows), kThreads, 0, stream_>>>(
        rows, cols, d_logits, d_labels, d_grad, d_loss, d_correct);
    PS_CUDA_CHECK(cudaGetLastError());
    FinishLoss(rows, d_loss, d_correct, d_grad, grad, rows * cols, loss_sum, correct);
  }

  void SigmoidCrossEntropy(int64_t rows, const float* logits, const int32_t* labels, float* grad,
                           double* loss_sum, int64_t* correct) override {
    *loss_sum = 0.0;
    *correct = 0;
    if (rows == 0) return;
    for (int64_t r = 0; r < rows; ++r) {
      if (labels[r] != 0 && labels[r] != 1) {
        std::fprintf(stderr,
                     "CudaBackend::SigmoidCrossEntropy: label %d of row %lld is not 0 or 1\n",
                     labels[r], static_cast<long long>(r));
        std::abort();
      }
    }
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_logits = buf_[0].Get<float>(rows);
    int32_t* d_labels = buf_[1].Get<int32_t>(rows);
    float* d_grad = grad != nullptr ? buf_[2].Get<float>(rows) : nullptr;
    double* d_loss = buf_[3].Get<double>(rows);
    int32_t* d_correct = buf_[4].Get<int32_t>(rows);
    ToDevice(d_logits, logits, rows);
    ToDevice(d_labels, labels, rows);
    SigmoidCrossEntropyKernel<<<Blocks(rows), kThreads, 0, stream_>>>(
        rows, d_logits, d_labels, d_grad, d_loss, d_correct);
    PS_CUDA_CHECK(cudaGetLastError());
    FinishLoss(rows, d_loss, d_correct, d_grad, grad, rows, loss_sum, correct);
  }

  // The end of every loss: per-row losses and hits (and the gradient, of
  // `grad_elements` floats, if asked for) to the host, summed there.
  void FinishLoss(int64_t rows, const double* d_loss, const int32_t* d_correct,
                  const float* d_grad, float* grad, int64_t grad_elements, double* loss_sum,
                  int64_t* correct) {
    row_loss_.resize(static_cast<size_t>(rows));
    row_correct_.resize(static_cast<size_t>(rows));
    ToHost(row_loss_.data(), d_loss, rows);
    ToHost(row_correct_.data(), d_correct, rows);
    if (grad != nullptr) ToHost(grad, d_grad, grad_elements);
    Sync();
    double total = 0.0;
    int64_t hits = 0;
    for (int64_t r = 0; r < rows; ++r) {
      total += row_loss_[r];
      hits += row_correct_[r];
    }
    *loss_sum = total;
    *correct = hits;
  }

  // --- Conv-net ops (kernels in cuda_nn_kernels.cuh); each copies in,
  // launches, copies out and synchronizes, as the ops above.

  void Activate(ActivationFn f, int64_t n, const float* x, float* y) override {
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = buf_[0].Get<float>(n);
    ToDevice(d_x, x, n);
    cuda_nn::ActivateKernel<<<Blocks(n), kThreads, 0, stream_>>>(f, n, d_x, d_x);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(y, d_x, n);
    Sync();
  }

  void ActivateGrad(ActivationFn f, int64_t n, const float* x, const float* y,
                    float* dy) override {
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = nullptr;
    if (f == ActivationFn::kGelu) {
      d_x = buf_[0].Get<float>(n);
      ToDevice(d_x, x, n);
    }
    float* d_y = buf_[1].Get<float>(n);
    float* d_dy = buf_[2].Get<float>(n);
    if (f != ActivationFn::kGelu) ToDevice(d_y, y, n);
    ToDevice(d_dy, dy, n);
    cuda_nn::ActivateGradKernel<<<Blocks(n), kThreads, 0, stream_>>>(f, n, d_x, d_y, d_dy);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(dy, d_dy, n);
    Sync();
  }

  void RegressionLoss(RegressionLossFn f, float delta, int64_t rows, int64_t cols,
                      const float* outputs, const int32_t* labels, float* grad, double* loss_sum,
                      int64_t* correct) override {
    *loss_sum = 0.0;
    *correct = 0;
    if (rows == 0) return;
    for (int64_t r = 0; r < rows; ++r) {
      const bool bad = cols == 1 ? (labels[r] != 0 && labels[r] != 1)
                                 : (labels[r] < 0 || labels[r] >= cols);
      if (bad) {
        std::fprintf(stderr, "CudaBackend::RegressionLoss: label %d of row %lld is invalid\n",
                     labels[r], static_cast<long long>(r));
        std::abort();
      }
    }
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_out = buf_[0].Get<float>(rows * cols);
    int32_t* d_labels = buf_[1].Get<int32_t>(rows);
    float* d_grad = grad != nullptr ? buf_[2].Get<float>(rows * cols) : nullptr;
    double* d_loss = buf_[3].Get<double>(rows);
    int32_t* d_correct = buf_[4].Get<int32_t>(rows);
    ToDevice(d_out, outputs, rows * cols);
    ToDevice(d_labels, labels, rows);
    cuda_nn::RegressionLossKernel<<<Blocks(rows), kThreads, 0, stream_>>>(
        f, delta, rows, cols, d_out, d_labels, d_grad, d_loss, d_correct);
    PS_CUDA_CHECK(cudaGetLastError());
    FinishLoss(rows, d_loss, d_correct, d_grad, grad, rows * cols, loss_sum, correct);
  }

  void Im2Col(const Window2d& g, const float* x, float* cols) override {
    const int64_t in = g.batch * g.height * g.width * g.channels;
    const int64_t out = g.patches() * g.patch_size();
    if (out == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = buf_[0].Get<float>(in);
    float* d_cols = buf_[1].Get<float>(out);
    ToDevice(d_x, x, in);
    cuda_nn::Im2ColKernel<<<Blocks(out), kThreads, 0, stream_>>>(g, d_x, d_cols);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(cols, d_cols, out);
    Sync();
  }

  void Col2Im(const Window2d& g, const float* cols, float* dx) override {
    const int64_t in = g.batch * g.height * g.width * g.channels;
    if (in == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    const int64_t n_cols = g.patches() * g.patch_size();
    float* d_cols = buf_[0].Get<float>(n_cols);
    float* d_dx = buf_[1].Get<float>(in);
    ToDevice(d_cols, cols, n_cols);
    cuda_nn::Col2ImKernel<<<Blocks(in), kThreads, 0, stream_>>>(g, d_cols, d_dx);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(dx, d_dx, in);
    Sync();
  }

  void MaxPool(const Window2d& g, const float* x, float* y, int32_t* argmax) override {
    Pool(true, g, x, y, argmax);
  }
  void AvgPool(const Window2d& g, const float* x, float* y) override {
    Pool(false, g, x, y, nullptr);
  }
  void MaxPoolGrad(const Window2d& g, const float* dy, const int32_t* argmax,
                   float* dx) override {
    PoolGrad(true, g, dy, argmax, dx);
  }
  void AvgPoolGrad(const Window2d& g, const float* dy, float* dx) override {
    PoolGrad(false, g, dy, nullptr, dx);
  }

  void Dropout(int64_t n, float rate, uint64_t seed, const float* x, float* y,
               float* mask) override {
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = buf_[0].Get<float>(n);
    float* d_y = buf_[1].Get<float>(n);
    float* d_mask = buf_[2].Get<float>(n);
    ToDevice(d_x, x, n);
    cuda_nn::DropoutKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, rate, seed, d_x, d_y, d_mask);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(y, d_y, n);
    ToHost(mask, d_mask, n);
    Sync();
  }

  void Multiply(int64_t n, const float* a, float* y) override {
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_a = buf_[0].Get<float>(n);
    float* d_y = buf_[1].Get<float>(n);
    ToDevice(d_a, a, n);
    ToDevice(d_y, y, n);
    cuda_nn::MultiplyKernel<<<Blocks(n), kThreads, 0, stream_>>>(n, d_a, d_y);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(y, d_y, n);
    Sync();
  }

  void BatchNormTrain(int64_t rows, int64_t channels, const float* x, const float* gamma,
                      const float* beta, float epsilon, float* y, float* xhat, float* mean,
                      float* var, float* inv_std) override {
    const int64_t n = rows * channels;
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = buf_[0].Get<float>(n);
    float* d_y = buf_[1].Get<float>(n);
    float* d_xhat = buf_[2].Get<float>(n);
    float* d_stats = buf_[3].Get<float>(5 * channels);  // gamma beta mean var inv_std
    float* d_gamma = d_stats;
    float* d_beta = d_stats + channels;
    float* d_mean = d_stats + 2 * channels;
    float* d_var = d_stats + 3 * channels;
    float* d_inv = d_stats + 4 * channels;
    ToDevice(d_x, x, n);
    ToDevice(d_gamma, gamma, channels);
    ToDevice(d_beta, beta, channels);
    cuda_nn::BatchStatsKernel<<<Blocks(channels), kThreads, 0, stream_>>>(
        rows, channels, d_x, epsilon, d_mean, d_var, d_inv);
    PS_CUDA_CHECK(cudaGetLastError());
    cuda_nn::NormalizeKernel<<<Blocks(n), kThreads, 0, stream_>>>(
        rows, channels, d_x, d_gamma, d_beta, d_mean, d_inv, d_y, d_xhat);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(y, d_y, n);
    ToHost(xhat, d_xhat, n);
    ToHost(mean, d_mean, channels);
    ToHost(var, d_var, channels);
    ToHost(inv_std, d_inv, channels);
    Sync();
  }

  void BatchNormInfer(int64_t rows, int64_t channels, const float* x, const float* gamma,
                      const float* beta, const float* mean, const float* var, float epsilon,
                      float* y) override {
    const int64_t n = rows * channels;
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = buf_[0].Get<float>(n);
    float* d_y = buf_[1].Get<float>(n);
    float* d_stats = buf_[3].Get<float>(5 * channels);  // gamma beta mean var inv_std
    ToDevice(d_x, x, n);
    ToDevice(d_stats, gamma, channels);
    ToDevice(d_stats + channels, beta, channels);
    ToDevice(d_stats + 2 * channels, mean, channels);
    ToDevice(d_stats + 3 * channels, var, channels);
    cuda_nn::InvStdKernel<<<Blocks(channels), kThreads, 0, stream_>>>(
        channels, d_stats + 3 * channels, epsilon, d_stats + 4 * channels);
    PS_CUDA_CHECK(cudaGetLastError());
    cuda_nn::NormalizeKernel<<<Blocks(n), kThreads, 0, stream_>>>(
        rows, channels, d_x, d_stats, d_stats + channels, d_stats + 2 * channels,
        d_stats + 4 * channels, d_y, nullptr);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(y, d_y, n);
    Sync();
  }

  void BatchNormGrad(int64_t rows, int64_t channels, const float* xhat, const float* gamma,
                     const float* inv_std, const float* dy, float* dx, float* dgamma,
                     float* dbeta) override {
    const int64_t n = rows * channels;
    if (n == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_xhat = buf_[0].Get<float>(n);
    float* d_dy = buf_[1].Get<float>(n);
    float* d_dx = buf_[2].Get<float>(n);
    float* d_stats = buf_[3].Get<float>(4 * channels);  // gamma inv_std dgamma dbeta
    ToDevice(d_xhat, xhat, n);
    ToDevice(d_dy, dy, n);
    ToDevice(d_stats, gamma, channels);
    ToDevice(d_stats + channels, inv_std, channels);
    cuda_nn::BatchNormReduceKernel<<<Blocks(channels), kThreads, 0, stream_>>>(
        rows, channels, d_xhat, d_dy, d_stats + 2 * channels, d_stats + 3 * channels);
    PS_CUDA_CHECK(cudaGetLastError());
    cuda_nn::BatchNormInputGradKernel<<<Blocks(n), kThreads, 0, stream_>>>(
        rows, channels, d_xhat, d_stats, d_stats + channels, d_dy, d_stats + 2 * channels,
        d_stats + 3 * channels, d_dx);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(dx, d_dx, n);
    ToHost(dgamma, d_stats + 2 * channels, channels);
    ToHost(dbeta, d_stats + 3 * channels, channels);
    Sync();
  }

 private:
  void Pool(bool max, const Window2d& g, const float* x, float* y, int32_t* argmax) {
    const int64_t in = g.batch * g.height * g.width * g.channels;
    const int64_t out = g.patches() * g.channels;
    if (out == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_x = buf_[0].Get<float>(in);
    float* d_y = buf_[1].Get<float>(out);
    int32_t* d_arg = max ? buf_[2].Get<int32_t>(out) : nullptr;
    ToDevice(d_x, x, in);
    cuda_nn::PoolKernel<<<Blocks(out), kThreads, 0, stream_>>>(max, g, d_x, d_y, d_arg);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(y, d_y, out);
    if (max) ToHost(argmax, d_arg, out);
    Sync();
  }

  void PoolGrad(bool max, const Window2d& g, const float* dy, const int32_t* argmax, float* dx) {
    const int64_t in = g.batch * g.height * g.width * g.channels;
    const int64_t out = g.patches() * g.channels;
    if (in == 0) return;
    PS_CUDA_CHECK(cudaSetDevice(device_));
    float* d_dy = buf_[0].Get<float>(out);
    int32_t* d_arg = max ? buf_[1].Get<int32_t>(out) : nullptr;
    float* d_dx = buf_[2].Get<float>(in);
    ToDevice(d_dy, dy, out);
    if (max) ToDevice(d_arg, argmax, out);
    cuda_nn::PoolGradKernel<<<Blocks(in), kThreads, 0, stream_>>>(max, g, d_dy, d_arg, d_dx);
    PS_CUDA_CHECK(cudaGetLastError());
    ToHost(dx, d_dx, in);
    Sync();
  }

  template <typename T>
  void ToDevice(T* dst, const T* src, int64_t count) {
    if (count == 0) return;
    PS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * sizeof(T),
                                  cudaMemcpyHostToDevice, stream_));
  }
  template <typename T>
  void ToHost(T* dst, const T* src, int64_t count) {
    if (count == 0) return;
    PS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * sizeof(T),
                                  cudaMemcpyDeviceToHost, stream_));
  }
  void Sync() { PS_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  const int device_;
  const std::string name_;
  cudaStream_t stream_;
  cublasHandle_t cublas_;
  // Scratch slots, reused by every op (each op uses slots from 0 up).
  DeviceBuffer buf_[5];
  std::vector<double> row_loss_;
  std::vector<int32_t> row_correct_;
};

void SetError(std::string* error, const std::string& message) {
  if (error != nullptr) *error = message;
}

}  // namespace

int CudaDeviceCount(std::string* error) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Reset the runtime's last-error state so later calls start clean.
    cudaGetLastError();
    SetError(error, std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err));
    return 0;
  }
  if (count == 0) {
    SetError(error, "cudaGetDeviceCount: no CUDA device found");
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> CreateCudaBackend(std::string* error, int device) {
  const int count = CudaDeviceCount(error);
  if (count == 0) return nullptr;
  if (device < 0 || device >= count) {
    SetError(error, "CUDA device " + std::to_string(device) + " does not exist (" +
                        std::to_string(count) + " visible)");
    return nullptr;
  }
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    SetError(error, "cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(err));
    return nullptr;
  }
  cudaDeviceProp props;
  err = cudaGetDeviceProperties(&props, device);
  if (err != cudaSuccess) {
    SetError(error, "cudaGetDeviceProperties(" + std::to_string(device) +
                        "): " + cudaGetErrorString(err));
    return nullptr;
  }
  cudaStream_t stream = nullptr;
  err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    SetError(error, std::string("cudaStreamCreate: ") + cudaGetErrorString(err));
    return nullptr;
  }
  cublasHandle_t cublas = nullptr;
  cublasStatus_t st = cublasCreate(&cublas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream);
    SetError(error, std::string("cublasCreate: ") + cublasGetStatusString(st));
    return nullptr;
  }
  st = cublasSetStream(cublas, stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(cublas);
    cudaStreamDestroy(stream);
    SetError(error, std::string("cublasSetStream: ") + cublasGetStatusString(st));
    return nullptr;
  }
  // Plain FP32 math: no TF32 tensor-core shortcut, so results match the CPU.
  st = cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(cublas);
    cudaStreamDestroy(stream);
    SetError(error, std::string("cublasSetMathMode: ") + cublasGetStatusString(st));
    return nullptr;
  }
  return std::make_unique<CudaBackend>(device, props.name, stream, cublas);
}

}  // namespace pscluster
