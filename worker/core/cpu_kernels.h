// The CPU backend's loops for everything but GEMM (cpu_backend.h calls
// OpenBLAS for that): activations, the regression losses, im2col/col2im,
// pooling, dropout and batch normalization. Each function is the CPU body of
// the Backend method of the same name (backend.h states the contracts);
// they are free functions so that tests can use them as references.
//
// Thread-safety: stateless; safe to call from any thread on disjoint output.
#ifndef PSCLUSTER_WORKER_CORE_CPU_KERNELS_H_
#define PSCLUSTER_WORKER_CORE_CPU_KERNELS_H_

#include <cstdint>

#include "worker/core/backend.h"

namespace pscluster {
namespace cpu {

void Activate(ActivationFn f, int64_t n, const float* x, float* y);
void ActivateGrad(ActivationFn f, int64_t n, const float* x, const float* y, float* dy);

void RegressionLoss(RegressionLossFn f, float delta, int64_t rows, int64_t cols,
                    const float* outputs, const int32_t* labels, float* grad, double* loss_sum,
                    int64_t* correct);

void Im2Col(const Window2d& g, const float* x, float* cols);
void Col2Im(const Window2d& g, const float* cols, float* dx);

void MaxPool(const Window2d& g, const float* x, float* y, int32_t* argmax);
void MaxPoolGrad(const Window2d& g, const float* dy, const int32_t* argmax, float* dx);
void AvgPool(const Window2d& g, const float* x, float* y);
void AvgPoolGrad(const Window2d& g, const float* dy, float* dx);

void Dropout(int64_t n, float rate, uint64_t seed, const float* x, float* y, float* mask);
void Multiply(int64_t n, const float* a, float* y);

void BatchNormTrain(int64_t rows, int64_t channels, const float* x, const float* gamma,
                    const float* beta, float epsilon, float* y, float* xhat, float* mean,
                    float* var, float* inv_std);
void BatchNormInfer(int64_t rows, int64_t channels, const float* x, const float* gamma,
                    const float* beta, const float* mean, const float* var, float epsilon,
                    float* y);
void BatchNormGrad(int64_t rows, int64_t channels, const float* xhat, const float* gamma,
                   const float* inv_std, const float* dy, float* dx, float* dgamma, float* dbeta);

}  // namespace cpu
}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_CPU_KERNELS_H_
