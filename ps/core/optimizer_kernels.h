// Dense optimizer update kernels: tight loops over float arrays.
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

}  // namespace kernels
}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_OPTIMIZER_KERNELS_H_
