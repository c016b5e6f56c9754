// CUDA kernels of the conv-net Backend ops (activations, regression losses,
// im2col/col2im, pooling, dropout, batch norm), included by cuda_backend.cu
// only. Every kernel uses a grid-stride loop, so any size works with a capped
// grid, and none uses atomics: each output element is summed by one thread
// in a fixed order, so results are deterministic. backend.h states what each
// op computes; cpu_kernels.cc is the reference they are tested against.
#ifndef PSCLUSTER_WORKER_CORE_CUDA_NN_KERNELS_CUH_
#define PSCLUSTER_WORKER_CORE_CUDA_NN_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/core/backend.h"

namespace pscluster {
namespace cuda_nn {

#define PS_GRID_LOOP(i, n)                                                  \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void ActivateKernel(ActivationFn f, int64_t n, const float* x, float* y) {
  PS_GRID_LOOP(i, n) {
    const float v = x[i];
    switch (f) {
      case ActivationFn::kRelu:
        y[i] = v > 0.0f ? v : 0.0f;
        break;
      case ActivationFn::kTanh:
        y[i] = tanhf(v);
        break;
      case ActivationFn::kSigmoid: {
        const float e = expf(-fabsf(v));
        y[i] = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        break;
      }
      case ActivationFn::kGelu: {
        const double d = v;
        y[i] = static_cast<float>(0.5 * d * (1.0 + erf(d * 0.70710678118654752440)));
        break;
      }
    }
  }
}

__global__ void ActivateGradKernel(ActivationFn f, int64_t n, const float* x, const float* y,
                                   float* dy) {
  PS_GRID_LOOP(i, n) {
    switch (f) {
      case ActivationFn::kRelu:
        if (!(y[i] > 0.0f)) dy[i] = 0.0f;
        break;
      case ActivationFn::kTanh:
        dy[i] *= 1.0f - y[i] * y[i];
        break;
      case ActivationFn::kSigmoid:
        dy[i] *= y[i] * (1.0f - y[i]);
        break;
      case ActivationFn::kGelu: {
        const double v = x[i];
        const double cdf = 0.5 * (1.0 + erf(v * 0.70710678118654752440));
        const double pdf = 0.39894228040143267794 * exp(-0.5 * v * v);
        dy[i] = static_cast<float>(dy[i] * (cdf + v * pdf));
        break;
      }
    }
  }
}

// One thread per row, as the cross-entropy kernels.
__global__ void RegressionLossKernel(RegressionLossFn f, float delta, int64_t rows, int64_t cols,
                                     const float* outputs, const int32_t* labels, float* grad,
                                     double* row_loss, int32_t* row_correct) {
  const double scale = 1.0 / (static_cast<double>(rows) * cols);
  PS_GRID_LOOP(r, rows) {
    const float* o = outputs + r * cols;
    const int32_t label = labels[r];
    double loss = 0.0;
    int64_t argmax = 0;
    for (int64_t c = 0; c < cols; ++c) {
      if (o[c] > o[argmax]) argmax = c;
      const double target = cols == 1 ? label : (c == label ? 1.0 : 0.0);
      const double e = static_cast<double>(o[c]) - target;
      double g;
      if (f == RegressionLossFn::kMse) {
        loss += e * e;
        g = 2.0 * e;
      } else if (fabs(e) <= delta) {
        loss += 0.5 * e * e;
        g = e;
      } else {
        loss += delta * (fabs(e) - 0.5 * delta);
        g = e > 0 ? delta : -delta;
      }
      if (grad != nullptr) grad[r * cols + c] = static_cast<float>(g * scale);
    }
    row_loss[r] = loss / static_cast<double>(cols);
    row_correct[r] = (cols == 1 ? ((o[0] >= 0.5f) == (label == 1)) : argmax == label) ? 1 : 0;
  }
}

// One thread per cols element (patch p, window element (ky, kx), channel c).
__global__ void Im2ColKernel(Window2d g, const float* x, float* cols) {
  const int64_t k = g.patch_size();
  PS_GRID_LOOP(i, g.patches() * k) {
    const int64_t p = i / k, e = i % k;
    const int64_t c = e % g.channels, kx = (e / g.channels) % g.window_w,
                  ky = e / (g.channels * g.window_w);
    const int64_t ox = p % g.out_w, oy = (p / g.out_w) % g.out_h, b = p / (g.out_w * g.out_h);
    const int64_t iy = oy * g.stride_h - g.pad_top + ky, ix = ox * g.stride_w - g.pad_left + kx;
    cols[i] = iy >= 0 && iy < g.height && ix >= 0 && ix < g.width
                  ? x[((b * g.height + iy) * g.width + ix) * g.channels + c]
                  : 0.0f;
  }
}

// One thread per input element: sums the cols entries copied from it.
__global__ void Col2ImKernel(Window2d g, const float* cols, float* dx) {
  const int64_t k = g.patch_size();
  PS_GRID_LOOP(i, g.batch * g.height * g.width * g.channels) {
    const int64_t c = i % g.channels, ix = (i / g.channels) % g.width,
                  iy = (i / (g.channels * g.width)) % g.height,
                  b = i / (g.channels * g.width * g.height);
    float sum = 0.0f;
    for (int64_t ky = 0; ky < g.window_h; ++ky) {
      const int64_t ty = iy + g.pad_top - ky;
      if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= g.out_h) continue;
      for (int64_t kx = 0; kx < g.window_w; ++kx) {
        const int64_t tx = ix + g.pad_left - kx;
        if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= g.out_w) continue;
        const int64_t p = (b * g.out_h + ty / g.stride_h) * g.out_w + tx / g.stride_w;
        sum += cols[p * k + (ky * g.window_w + kx) * g.channels + c];
      }
    }
    dx[i] = sum;
  }
}

// The window of output (oy, ox) clipped to the input: rows [y0, y1), columns [x0, x1).
__device__ void WindowRange(const Window2d& g, int64_t oy, int64_t ox, int64_t* y0, int64_t* y1,
                            int64_t* x0, int64_t* x1) {
  const int64_t top = oy * g.stride_h - g.pad_top, left = ox * g.stride_w - g.pad_left;
  *y0 = top > 0 ? top : 0;
  *y1 = top + g.window_h < g.height ? top + g.window_h : g.height;
  *x0 = left > 0 ? left : 0;
  *x1 = left + g.window_w < g.width ? left + g.window_w : g.width;
}

// One thread per output element (b, oy, ox, c).
__global__ void PoolKernel(bool max, Window2d g, const float* x, float* y, int32_t* argmax) {
  PS_GRID_LOOP(i, g.patches() * g.channels) {
    const int64_t c = i % g.channels, p = i / g.channels;
    const int64_t ox = p % g.out_w, oy = (p / g.out_w) % g.out_h, b = p / (g.out_w * g.out_h);
    int64_t y0, y1, x0, x1;
    WindowRange(g, oy, ox, &y0, &y1, &x0, &x1);
    float best = 0.0f, sum = 0.0f;
    int64_t arg = -1;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) {
        const int64_t at = ((b * g.height + iy) * g.width + ix) * g.channels + c;
        const float v = x[at];
        sum += v;
        if (arg < 0 || v > best) {
          best = v;
          arg = at;
        }
      }
    }
    if (max) {
      y[i] = best;
      argmax[i] = static_cast<int32_t>(arg);
    } else {
      y[i] = sum / static_cast<float>((y1 - y0) * (x1 - x0));
    }
  }
}

// One thread per input element: sums the gradients of the windows holding it.
__global__ void PoolGradKernel(bool max, Window2d g, const float* dy, const int32_t* argmax,
                               float* dx) {
  PS_GRID_LOOP(i, g.batch * g.height * g.width * g.channels) {
    const int64_t c = i % g.channels, ix = (i / g.channels) % g.width,
                  iy = (i / (g.channels * g.width)) % g.height,
                  b = i / (g.channels * g.width * g.height);
    float sum = 0.0f;
    for (int64_t ky = 0; ky < g.window_h; ++ky) {
      const int64_t ty = iy + g.pad_top - ky;
      if (ty < 0 || ty % g.stride_h != 0 || ty / g.stride_h >= g.out_h) continue;
      for (int64_t kx = 0; kx < g.window_w; ++kx) {
        const int64_t tx = ix + g.pad_left - kx;
        if (tx < 0 || tx % g.stride_w != 0 || tx / g.stride_w >= g.out_w) continue;
        const int64_t oy = ty / g.stride_h, ox = tx / g.stride_w;
        const int64_t o = ((b * g.out_h + oy) * g.out_w + ox) * g.channels + c;
        if (max) {
          if (argmax[o] == i) sum += dy[o];
        } else {
          int64_t y0, y1, x0, x1;
          WindowRange(g, oy, ox, &y0, &y1, &x0, &x1);
          sum += dy[o] / static_cast<float>((y1 - y0) * (x1 - x0));
        }
      }
    }
    dx[i] = sum;
  }
}

__global__ void DropoutKernel(int64_t n, float rate, uint64_t seed, const float* x, float* y,
                              float* mask) {
  const float keep = 1.0f / (1.0f - rate);
  PS_GRID_LOOP(i, n) {
    mask[i] = DropoutUniform(seed, static_cast<uint64_t>(i)) >= rate ? keep : 0.0f;
    y[i] = x[i] * mask[i];
  }
}

__global__ void MultiplyKernel(int64_t n, const float* a, float* y) {
  PS_GRID_LOOP(i, n) { y[i] *= a[i]; }
}

// One thread per channel: the batch mean and biased variance, in double.
__global__ void BatchStatsKernel(int64_t rows, int64_t channels, const float* x, float epsilon,
                                 float* mean, float* var, float* inv_std) {
  PS_GRID_LOOP(c, channels) {
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) sum += x[r * channels + c];
    const double m = sum / static_cast<double>(rows);
    double sq = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const double d = x[r * channels + c] - m;
      sq += d * d;
    }
    const double v = sq / static_cast<double>(rows);
    mean[c] = static_cast<float>(m);
    var[c] = static_cast<float>(v);
    inv_std[c] = static_cast<float>(1.0 / sqrt(v + epsilon));
  }
}

// y = gamma * (x - mean) * inv_std + beta; xhat written when not null.
__global__ void NormalizeKernel(int64_t rows, int64_t channels, const float* x, const float* gamma,
                                const float* beta, const float* mean, const float* inv_std,
                                float* y, float* xhat) {
  PS_GRID_LOOP(i, rows * channels) {
    const int64_t c = i % channels;
    const float h = (x[i] - mean[c]) * inv_std[c];
    if (xhat != nullptr) xhat[i] = h;
    y[i] = gamma[c] * h + beta[c];
  }
}

// inv_std[c] = 1 / sqrt(var[c] + epsilon).
__global__ void InvStdKernel(int64_t channels, const float* var, float epsilon, float* inv_std) {
  PS_GRID_LOOP(c, channels) { inv_std[c] = 1.0f / sqrtf(var[c] + epsilon); }
}

// One thread per channel: dgamma = sum(dy * xhat), dbeta = sum(dy).
__global__ void BatchNormReduceKernel(int64_t rows, int64_t channels, const float* xhat,
                                      const float* dy, float* dgamma, float* dbeta) {
  PS_GRID_LOOP(c, channels) {
    double dg = 0.0, db = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      dg += static_cast<double>(dy[r * channels + c]) * xhat[r * channels + c];
      db += dy[r * channels + c];
    }
    dgamma[c] = static_cast<float>(dg);
    dbeta[c] = static_cast<float>(db);
  }
}

__global__ void BatchNormInputGradKernel(int64_t rows, int64_t channels, const float* xhat,
                                         const float* gamma, const float* inv_std, const float* dy,
                                         const float* dgamma, const float* dbeta, float* dx) {
  const float n = static_cast<float>(rows);
  PS_GRID_LOOP(i, rows * channels) {
    const int64_t c = i % channels;
    dx[i] = gamma[c] * inv_std[c] / n * (n * dy[i] - dbeta[c] - xhat[i] * dgamma[c]);
  }
}

#undef PS_GRID_LOOP

}  // namespace cuda_nn
}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_CUDA_NN_KERNELS_CUH_
