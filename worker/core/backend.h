// Backend: the dense math of a worker's forward and backward pass (GEMM,
// bias, activations, losses, and the image ops of conv nets: im2col/col2im,
// pooling, dropout, batch norm), implemented once for the CPU (OpenBLAS,
// cpu_backend.h, cpu_kernels.h) and once for CUDA (cuBLAS + small kernels,
// cuda_backend.h).
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

// Marks the few inline helpers below that CUDA kernels call too.
#if defined(__CUDACC__)
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

// Elementwise activations besides the dedicated Relu.
enum class ActivationFn { kRelu, kTanh, kSigmoid, kGelu };

// Losses between outputs and the one-hot label (Backend::RegressionLoss).
enum class RegressionLossFn { kMse, kHuber };

// The geometry of a 2-D window op (conv2d's im2col, pooling) over a batch of
// NHWC images: `batch` images of height x width x channels, a window of
// window_h x window_w moved by stride_h / stride_w, the input padded by
// pad_top rows above and pad_left columns on the left (the rest of the
// padding below and on the right), giving out_h x out_w positions.
// Padding is zeros for im2col and ignored by pooling.
struct Window2d {
  int64_t batch = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  int64_t window_h = 1;
  int64_t window_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_top = 0;
  int64_t pad_left = 0;
  int64_t out_h = 0;
  int64_t out_w = 0;
  // Rows of the im2col matrix (one per output position) and its columns
  // (one per window element and channel, ordered (row, column, channel)).
  PS_HOST_DEVICE int64_t patches() const { return batch * out_h * out_w; }
  PS_HOST_DEVICE int64_t patch_size() const { return window_h * window_w * channels; }
};

// Dropout keeps element i of a call seeded `seed` when
// DropoutUniform(seed, i) >= rate: a counter-based hash (SplitMix64), so the
// mask depends only on (seed, i) and every backend draws the same one.
PS_HOST_DEVICE inline float DropoutUniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
}

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

  // --- Activations. y[i] = f(x[i]) for i in [0, n); y may be x. tanh,
  // sigmoid, relu, and gelu(x) = x * Phi(x) (the exact erf form).
  virtual void Activate(ActivationFn f, int64_t n, const float* x, float* y) = 0;

  // dy[i] *= f'(x[i]), where y = f(x) is the forward output. gelu reads x
  // (its input); the others read only y, and x may be null for them.
  virtual void ActivateGrad(ActivationFn f, int64_t n, const float* x, const float* y,
                            float* dy) = 0;

  // --- Mean squared error / Huber loss of the rows x cols `outputs` against
  // the one-hot encoding of `labels` (cols >= 2), or against the 0/1 label
  // itself when cols == 1. Per row, the loss is the MEAN over cols of
  // e^2 (mse) or of 0.5 e^2 for |e| <= delta, delta (|e| - 0.5 delta) beyond
  // (huber), e = output - target. *loss_sum is the SUM over rows. If `grad`
  // is not null it gets d(mean loss over rows)/d(outputs). *correct counts
  // rows whose argmax (first maximum) is the label, or, with cols == 1,
  // where (output >= 0.5) == (label == 1).
  // REQUIRES: labels in [0, cols) (0 or 1 when cols == 1; a backend aborts
  // otherwise), delta > 0 for huber.
  virtual void RegressionLoss(RegressionLossFn f, float delta, int64_t rows, int64_t cols,
                              const float* outputs, const int32_t* labels, float* grad,
                              double* loss_sum, int64_t* correct) = 0;

  // --- conv2d as im2col + Gemm. cols [g.patches(), g.patch_size()]: row p
  // = output position (image, oy, ox), holding the window's input values
  // (row, column, channel order; zero where the window covers padding).
  // x is [g.batch, g.height, g.width, g.channels].
  virtual void Im2Col(const Window2d& g, const float* x, float* cols) = 0;

  // The adjoint of Im2Col: dx (overwritten) = the sum, over every cols entry,
  // of its value at the input element it was copied from (padding entries
  // are dropped).
  virtual void Col2Im(const Window2d& g, const float* cols, float* dx) = 0;

  // --- Pooling over each channel. y is [g.batch, g.out_h, g.out_w,
  // g.channels]. MaxPool writes, per output, the index into x of the max
  // (first on ties; padding never wins) to argmax; AvgPool divides by the
  // number of input elements the window covers (padding not counted, as TF).
  // REQUIRES: every window covers at least one input element.
  virtual void MaxPool(const Window2d& g, const float* x, float* y, int32_t* argmax) = 0;
  // dx (overwritten, [batch, height, width, channels]) gets each dy at its
  // argmax.
  virtual void MaxPoolGrad(const Window2d& g, const float* dy, const int32_t* argmax,
                           float* dx) = 0;
  virtual void AvgPool(const Window2d& g, const float* x, float* y) = 0;
  virtual void AvgPoolGrad(const Window2d& g, const float* dy, float* dx) = 0;

  // --- Dropout (inverted): mask[i] = DropoutUniform(seed, i) >= rate ?
  // 1 / (1 - rate) : 0, and y[i] = x[i] * mask[i] (y may be x).
  // REQUIRES: 0 <= rate < 1.
  virtual void Dropout(int64_t n, float rate, uint64_t seed, const float* x, float* y,
                       float* mask) = 0;

  // y[i] *= a[i] (dropout's backward pass: dy *= mask).
  virtual void Multiply(int64_t n, const float* a, float* y) = 0;

  // --- Batch normalization over the rows of x [rows, channels] (for images,
  // rows = batch * height * width). Training: mean[c] and var[c] (biased,
  // over rows) of the batch are written, inv_std[c] = 1 / sqrt(var[c] +
  // epsilon), xhat = (x - mean) * inv_std and y = gamma * xhat + beta.
  // REQUIRES: rows >= 1.
  virtual void BatchNormTrain(int64_t rows, int64_t channels, const float* x, const float* gamma,
                              const float* beta, float epsilon, float* y, float* xhat,
                              float* mean, float* var, float* inv_std) = 0;
  // Inference with given (moving) statistics: y = gamma * (x - mean) /
  // sqrt(var + epsilon) + beta.
  virtual void BatchNormInfer(int64_t rows, int64_t channels, const float* x, const float* gamma,
                              const float* beta, const float* mean, const float* var,
                              float epsilon, float* y) = 0;
  // Backward of BatchNormTrain: dgamma = sum(dy * xhat), dbeta = sum(dy)
  // (per channel, overwritten), dx = gamma * inv_std / rows * (rows * dy -
  // dbeta - xhat * dgamma).
  virtual void BatchNormGrad(int64_t rows, int64_t channels, const float* xhat,
                             const float* gamma, const float* inv_std, const float* dy,
                             float* dx, float* dgamma, float* dbeta) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_BACKEND_H_
