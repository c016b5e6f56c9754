// CPU loops of the Backend ops; see cpu_kernels.h and backend.h.
#include "worker/core/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

namespace pscluster {
namespace cpu {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// The first input row and column of output position (oy, ox), and the
// window's range [k0, k1) that lies inside the input along one axis.
struct Span {
  int64_t origin, k0, k1;
};
Span Clip(int64_t out, int64_t stride, int64_t pad, int64_t window, int64_t size) {
  const int64_t origin = out * stride - pad;
  return {origin, std::max<int64_t>(0, -origin), std::min(window, size - origin)};
}

}  // namespace

void Activate(ActivationFn f, int64_t n, const float* x, float* y) {
  switch (f) {
    case ActivationFn::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
      return;
    case ActivationFn::kTanh:
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      return;
    case ActivationFn::kSigmoid:
      for (int64_t i = 0; i < n; ++i) {
        const float e = std::exp(-std::fabs(x[i]));  // never overflows
        y[i] = x[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      }
      return;
    case ActivationFn::kGelu:
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        y[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
      }
      return;
  }
}

void ActivateGrad(ActivationFn f, int64_t n, const float* x, const float* y, float* dy) {
  switch (f) {
    case ActivationFn::kRelu:
      for (int64_t i = 0; i < n; ++i) {
        if (!(y[i] > 0.0f)) dy[i] = 0.0f;
      }
      return;
    case ActivationFn::kTanh:
      for (int64_t i = 0; i < n; ++i) dy[i] *= 1.0f - y[i] * y[i];
      return;
    case ActivationFn::kSigmoid:
      for (int64_t i = 0; i < n; ++i) dy[i] *= y[i] * (1.0f - y[i]);
      return;
    case ActivationFn::kGelu:
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        const double cdf = 0.5 * (1.0 + std::erf(v * kInvSqrt2));
        const double pdf = kInvSqrt2Pi * std::exp(-0.5 * v * v);
        dy[i] = static_cast<float>(dy[i] * (cdf + v * pdf));
      }
      return;
  }
}

void RegressionLoss(RegressionLossFn f, float delta, int64_t rows, int64_t cols,
                    const float* outputs, const int32_t* labels, float* grad, double* loss_sum,
                    int64_t* correct) {
  double total = 0.0;
  int64_t hits = 0;
  const double scale = rows > 0 ? 1.0 / (static_cast<double>(rows) * cols) : 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = labels[r];
    const bool bad = cols == 1 ? (label != 0 && label != 1) : (label < 0 || label >= cols);
    if (bad) {
      std::fprintf(stderr, "cpu::RegressionLoss: label %d of row %lld is outside [0, %lld)\n",
                   label, static_cast<long long>(r),
                   static_cast<long long>(std::max<int64_t>(cols, 2)));
      std::abort();
    }
    const float* o = outputs + r * cols;
    double row_loss = 0.0;
    int64_t argmax = 0;
    for (int64_t c = 0; c < cols; ++c) {
      if (o[c] > o[argmax]) argmax = c;
      const double target = cols == 1 ? label : (c == label ? 1.0 : 0.0);
      const double e = static_cast<double>(o[c]) - target;
      double g;
      if (f == RegressionLossFn::kMse) {
        row_loss += e * e;
        g = 2.0 * e;
      } else if (std::fabs(e) <= delta) {
        row_loss += 0.5 * e * e;
        g = e;
      } else {
        row_loss += delta * (std::fabs(e) - 0.5 * delta);
        g = e > 0 ? delta : -delta;
      }
      if (grad != nullptr) grad[r * cols + c] = static_cast<float>(g * scale);
    }
    total += row_loss / static_cast<double>(cols);
    if (cols == 1 ? ((o[0] >= 0.5f) == (label == 1)) : argmax == label) ++hits;
  }
  *loss_sum = total;
  *correct = hits;
}

void Im2Col(const Window2d& g, const float* x, float* cols) {
  const int64_t c = g.channels;
  float* out = cols;
  for (int64_t b = 0; b < g.batch; ++b) {
    const float* image = x + b * g.height * g.width * c;
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      const Span ys = Clip(oy, g.stride_h, g.pad_top, g.window_h, g.height);
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const Span xs = Clip(ox, g.stride_w, g.pad_left, g.window_w, g.width);
        for (int64_t ky = 0; ky < g.window_h; ++ky) {
          if (ky < ys.k0 || ky >= ys.k1) {
            std::memset(out, 0, sizeof(float) * g.window_w * c);
            out += g.window_w * c;
            continue;
          }
          const float* row = image + (ys.origin + ky) * g.width * c;
          for (int64_t kx = 0; kx < g.window_w; ++kx, out += c) {
            if (kx < xs.k0 || kx >= xs.k1) {
              std::memset(out, 0, sizeof(float) * c);
            } else {
              std::memcpy(out, row + (xs.origin + kx) * c, sizeof(float) * c);
            }
          }
        }
      }
    }
  }
}

void Col2Im(const Window2d& g, const float* cols, float* dx) {
  const int64_t c = g.channels;
  std::fill(dx, dx + g.batch * g.height * g.width * c, 0.0f);
  const float* in = cols;
  for (int64_t b = 0; b < g.batch; ++b) {
    float* image = dx + b * g.height * g.width * c;
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      const Span ys = Clip(oy, g.stride_h, g.pad_top, g.window_h, g.height);
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const Span xs = Clip(ox, g.stride_w, g.pad_left, g.window_w, g.width);
        for (int64_t ky = 0; ky < g.window_h; ++ky) {
          for (int64_t kx = 0; kx < g.window_w; ++kx, in += c) {
            if (ky < ys.k0 || ky >= ys.k1 || kx < xs.k0 || kx >= xs.k1) continue;
            float* dst = image + ((ys.origin + ky) * g.width + xs.origin + kx) * c;
            for (int64_t ch = 0; ch < c; ++ch) dst[ch] += in[ch];
          }
        }
      }
    }
  }
}

void MaxPool(const Window2d& g, const float* x, float* y, int32_t* argmax) {
  const int64_t c = g.channels;
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t image = b * g.height * g.width * c;
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      const Span ys = Clip(oy, g.stride_h, g.pad_top, g.window_h, g.height);
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const Span xs = Clip(ox, g.stride_w, g.pad_left, g.window_w, g.width);
        float* out = y + ((b * g.out_h + oy) * g.out_w + ox) * c;
        int32_t* arg = argmax + ((b * g.out_h + oy) * g.out_w + ox) * c;
        std::fill(out, out + c, -std::numeric_limits<float>::infinity());
        std::fill(arg, arg + c, -1);
        for (int64_t ky = ys.k0; ky < ys.k1; ++ky) {
          for (int64_t kx = xs.k0; kx < xs.k1; ++kx) {
            const int64_t at = image + ((ys.origin + ky) * g.width + xs.origin + kx) * c;
            for (int64_t ch = 0; ch < c; ++ch) {
              if (arg[ch] < 0 || x[at + ch] > out[ch]) {
                out[ch] = x[at + ch];
                arg[ch] = static_cast<int32_t>(at + ch);
              }
            }
          }
        }
      }
    }
  }
}

void MaxPoolGrad(const Window2d& g, const float* dy, const int32_t* argmax, float* dx) {
  std::fill(dx, dx + g.batch * g.height * g.width * g.channels, 0.0f);
  const int64_t n = g.patches() * g.channels;
  for (int64_t i = 0; i < n; ++i) dx[argmax[i]] += dy[i];
}

void AvgPool(const Window2d& g, const float* x, float* y) {
  const int64_t c = g.channels;
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t image = b * g.height * g.width * c;
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      const Span ys = Clip(oy, g.stride_h, g.pad_top, g.window_h, g.height);
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const Span xs = Clip(ox, g.stride_w, g.pad_left, g.window_w, g.width);
        float* out = y + ((b * g.out_h + oy) * g.out_w + ox) * c;
        std::fill(out, out + c, 0.0f);
        for (int64_t ky = ys.k0; ky < ys.k1; ++ky) {
          for (int64_t kx = xs.k0; kx < xs.k1; ++kx) {
            const float* in = x + image + ((ys.origin + ky) * g.width + xs.origin + kx) * c;
            for (int64_t ch = 0; ch < c; ++ch) out[ch] += in[ch];
          }
        }
        const float inv = 1.0f / static_cast<float>((ys.k1 - ys.k0) * (xs.k1 - xs.k0));
        for (int64_t ch = 0; ch < c; ++ch) out[ch] *= inv;
      }
    }
  }
}

void AvgPoolGrad(const Window2d& g, const float* dy, float* dx) {
  const int64_t c = g.channels;
  std::fill(dx, dx + g.batch * g.height * g.width * c, 0.0f);
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t image = b * g.height * g.width * c;
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      const Span ys = Clip(oy, g.stride_h, g.pad_top, g.window_h, g.height);
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const Span xs = Clip(ox, g.stride_w, g.pad_left, g.window_w, g.width);
        const float* d = dy + ((b * g.out_h + oy) * g.out_w + ox) * c;
        const float inv = 1.0f / static_cast<float>((ys.k1 - ys.k0) * (xs.k1 - xs.k0));
        for (int64_t ky = ys.k0; ky < ys.k1; ++ky) {
          for (int64_t kx = xs.k0; kx < xs.k1; ++kx) {
            float* out = dx + image + ((ys.origin + ky) * g.width + xs.origin + kx) * c;
            for (int64_t ch = 0; ch < c; ++ch) out[ch] += d[ch] * inv;
          }
        }
      }
    }
  }
}

void Dropout(int64_t n, float rate, uint64_t seed, const float* x, float* y, float* mask) {
  const float keep = 1.0f / (1.0f - rate);
  for (int64_t i = 0; i < n; ++i) {
    mask[i] = DropoutUniform(seed, static_cast<uint64_t>(i)) >= rate ? keep : 0.0f;
    y[i] = x[i] * mask[i];
  }
}

void Multiply(int64_t n, const float* a, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a[i];
}

void BatchNormTrain(int64_t rows, int64_t channels, const float* x, const float* gamma,
                    const float* beta, float epsilon, float* y, float* xhat, float* mean,
                    float* var, float* inv_std) {
  std::vector<double> sum(channels, 0.0), sq(channels, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * channels;
    for (int64_t c = 0; c < channels; ++c) sum[c] += row[c];
  }
  for (int64_t c = 0; c < channels; ++c) sum[c] /= static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double d = row[c] - sum[c];
      sq[c] += d * d;
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    mean[c] = static_cast<float>(sum[c]);
    var[c] = static_cast<float>(sq[c] / static_cast<double>(rows));
    inv_std[c] = static_cast<float>(1.0 / std::sqrt(sq[c] / static_cast<double>(rows) + epsilon));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * channels;
    float* h = xhat + r * channels;
    float* out = y + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      h[c] = (in[c] - mean[c]) * inv_std[c];
      out[c] = gamma[c] * h[c] + beta[c];
    }
  }
}

void BatchNormInfer(int64_t rows, int64_t channels, const float* x, const float* gamma,
                    const float* beta, const float* mean, const float* var, float epsilon,
                    float* y) {
  std::vector<float> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    scale[c] = gamma[c] / std::sqrt(var[c] + epsilon);
    shift[c] = beta[c] - mean[c] * scale[c];
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * channels;
    float* out = y + r * channels;
    for (int64_t c = 0; c < channels; ++c) out[c] = in[c] * scale[c] + shift[c];
  }
}

void BatchNormGrad(int64_t rows, int64_t channels, const float* xhat, const float* gamma,
                   const float* inv_std, const float* dy, float* dx, float* dgamma, float* dbeta) {
  std::vector<double> dg(channels, 0.0), db(channels, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dy + r * channels;
    const float* h = xhat + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      dg[c] += static_cast<double>(d[c]) * h[c];
      db[c] += d[c];
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    dgamma[c] = static_cast<float>(dg[c]);
    dbeta[c] = static_cast<float>(db[c]);
  }
  const float n = static_cast<float>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dy + r * channels;
    const float* h = xhat + r * channels;
    float* out = dx + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float k = gamma[c] * inv_std[c] / n;
      out[c] = k * (n * d[c] - dbeta[c] - h[c] * dgamma[c]);
    }
  }
}

}  // namespace cpu
}  // namespace pscluster
