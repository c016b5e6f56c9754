// Backend: the dense math of a worker's forward and backward pass (GEMM,
// bias, ReLU, softmax and sigmoid cross-entropy), implemented once for the CPU (OpenBLAS,
// cpu_backend.h) and once for CUDA (cuBLAS + small kernels, cuda_backend.h).
// backend_factory.h picks one at run time from the job's `device:` setting.
//
// This header is plain C++ and includes no CUDA headers, so every target can
// use it.
//
// Conventions: matrices are row-major and dense (leading dimension = number
// of columns); every pointer is HOST memory owned by the caller and must stay
// valid for the duration of the call. Dimensions must fit in an int (BLAS).
//
// Thread-safety: a Backend is NOT thread-safe (the CUDA backend keeps device
// scratch buffers). Use one Backend per training thread.
#ifndef PSCLUSTER_WORKER_CORE_BACKEND_H_
#define PSCLUSTER_WORKER_CORE_BACKEND_H_

#include <cstdint>
#include <string>

namespace pscluster {

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu (OpenBLAS)" or "cuda:<device name>", for logs and status pages.
  virtual std::string name() const = 0;

  // C[m×n] = alpha * op(A) * op(B) + beta * C, where op(A) is m×k and op(B)
  // is k×n. trans_a means A is stored k×m and op(A) = Aᵀ (likewise for B).
  // When beta == 0, C is not read (it may hold garbage or NaN).
  // REQUIRES: m, n, k >= 0.
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, const float* b, float beta, float* c) = 0;

  // y[r][c] += bias[c] for the rows×cols matrix y.
  virtual void AddBias(int64_t rows, int64_t cols, const float* bias, float* y) = 0;

  // x[i] = max(x[i], 0) for i in [0, n), in place.
  virtual void Relu(int64_t n, float* x) = 0;

  // dy[i] = y[i] > 0 ? dy[i] : 0, where y is the output of Relu.
  virtual void ReluGrad(int64_t n, const float* y, float* dy) = 0;

  // db[c] = sum over r of dy[r][c] for the rows×cols matrix dy (db is
  // overwritten, not accumulated).
  virtual void BiasGrad(int64_t rows, int64_t cols, const float* dy, float* db) = 0;

  // Softmax cross-entropy of the rows×cols `logits` against `labels`.
  // If `grad` is not null, writes grad = (softmax(logits) - onehot(labels)) /
  // rows, the gradient of the MEAN loss over the rows. Sets *loss_sum to the
  // SUM of the per-row losses (computed with a stable log-sum-exp) and
  // *correct to the number of rows whose argmax (first maximum on ties)
  // equals the label.
  // REQUIRES: every label in [0, cols) (the caller validates its data; a
  // backend aborts on a bad label), cols >= 1, loss_sum and correct non-null.
  virtual void SoftmaxCrossEntropy(int64_t rows, int64_t cols, const float* logits,
                                   const int32_t* labels, float* grad, double* loss_sum,
                                   int64_t* correct) = 0;

  // Sigmoid (binary) cross-entropy of `rows` logits against 0/1 `labels`.
  // If `grad` is not null, writes grad[r] = (sigmoid(logits[r]) - labels[r]) /
  // rows, the gradient of the MEAN loss. Sets *loss_sum to the SUM of the
  // per-row log-losses, computed stably as max(x, 0) - x * y + log1p(exp(-|x|))
  // (finite for any finite logit), and *correct to the number of rows where
  // (sigmoid(x) >= 0.5) == (label == 1).
  // REQUIRES: every label is 0 or 1 (a backend aborts otherwise), loss_sum
  // and correct non-null.
  virtual void SigmoidCrossEntropy(int64_t rows, const float* logits, const int32_t* labels,
                                   float* grad, double* loss_sum, int64_t* correct) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_BACKEND_H_
