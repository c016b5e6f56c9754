// Optimizer update kernels: tight loops over float arrays.
//
// A kernel updates `n` consecutive elements: a whole dense variable, or one
// row of an embedding table or hash table (the sparse path calls the same
// kernels once per touched row, so dense and row-wise math cannot diverge).
//
// Built in their own library with -O3 -fno-math-errno so the loops (sqrtf
// included) vectorise. Pure functions over caller-owned memory; thread-safe
// as long as callers do not pass overlapping arrays from several threads.
#ifndef PSCLUSTER_PS_CORE_OPTIMIZER_KERNELS_H_
#define PSCLUSTER_PS_CORE_OPTIMIZER_KERNELS_H_

#include <cstdint>

namespace pscluster {
namespace kernels {

// w -= lr * g.
void SgdUpdate(float lr, const float* g, float* w, int64_t n);

// Keras momentum: v = momentum * v - lr * g; then w += v, or with nesterov
// w += momentum * v - lr * g.
void MomentumUpdate(float lr, float momentum, bool nesterov, const float* g, float* v, float* w,
                    int64_t n);

// accum += g * g; w -= lr * g / (sqrt(accum) + epsilon).
void AdagradUpdate(float lr, float epsilon, const float* g, float* accum, float* w, int64_t n);

// m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g;
// w -= lr_t * m / (sqrt(v) + epsilon). The caller folds the bias correction
// into lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t).
void AdamUpdate(float lr_t, float beta1, float beta2, float epsilon, const float* g, float* m,
                float* v, float* w, int64_t n);

// TF's ApplyFtrl (ResourceApplyFtrlV2 without l2_shrinkage), per element:
//   new_accum = accum + g * g
//   linear += g - (new_accum^-lr_power - accum^-lr_power) / lr * w
//   quadratic = new_accum^-lr_power / lr + 2 * l2
//   w = |linear| > l1 ? (sign(linear) * l1 - linear) / quadratic : 0
//   accum = new_accum
// lr_power == -0.5 takes a sqrt path (as TF does). Keras' `beta` is folded
// into l2 by the caller: l2 = l2 + beta / (2 * lr).
void FtrlUpdate(float lr, float lr_power, float l1, float l2, const float* g, float* accum,
                float* linear, float* w, int64_t n);

// The index of the first NaN or +-Inf among x[0, n), or -1 if all are finite.
// One pass over the bits (exponent all ones), in blocks that vectorise; only
// a block holding a bad value is scanned again for its index.
int64_t FirstNonFinite(const float* x, int64_t n);

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_OPTIMIZER_KERNELS_H_
