// The Backend conformance suite, part 2: the conv-net ops (activations,
// regression losses, im2col/col2im, pooling, dropout, batch norm), checked
// against direct definitions computed in double, adjoint identities and
// central finite differences. Part of the suite in backend_conformance.h, so
// the CPU and CUDA backends run the same checks.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "worker/core/backend_conformance.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

std::vector<float> Random(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// A window op over NHWC images with TF's same/valid padding.
Window2d MakeWindow(int64_t batch, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                    int64_t sh, int64_t sw, bool same) {
  Window2d g;
  g.batch = batch;
  g.height = h;
  g.width = w;
  g.channels = c;
  g.window_h = kh;
  g.window_w = kw;
  g.stride_h = sh;
  g.stride_w = sw;
  if (same) {
    g.out_h = (h + sh - 1) / sh;
    g.out_w = (w + sw - 1) / sw;
    g.pad_top = std::max<int64_t>((g.out_h - 1) * sh + kh - h, 0) / 2;
    g.pad_left = std::max<int64_t>((g.out_w - 1) * sw + kw - w, 0) / 2;
  } else {
    g.out_h = (h - kh) / sh + 1;
    g.out_w = (w - kw) / sw + 1;
  }
  return g;
}

// Geometries covering odd sizes, strides, non-square windows and padding.
std::vector<Window2d> Geometries(int64_t channels) {
  return {MakeWindow(2, 5, 5, channels, 3, 3, 1, 1, false),
          MakeWindow(2, 5, 5, channels, 3, 3, 1, 1, true),
          MakeWindow(1, 7, 6, channels, 2, 3, 2, 1, true),
          MakeWindow(3, 6, 7, channels, 3, 2, 2, 2, false),
          MakeWindow(1, 4, 4, channels, 4, 4, 1, 1, true),
          MakeWindow(2, 8, 8, channels, 2, 2, 2, 2, false)};
}

std::string Describe(const Window2d& g) {
  return ::testing::PrintToString(std::vector<int64_t>{g.batch, g.height, g.width, g.channels,
                                                       g.window_h, g.window_w, g.stride_h,
                                                       g.stride_w, g.pad_top, g.pad_left});
}

double GeluRef(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST_P(BackendConformanceTest, ActivationsMatchTheirDefinitions) {
  std::vector<float> x = Random(1001, 31, -6.0f, 6.0f);
  x.push_back(0.0f);
  x.push_back(40.0f);
  x.push_back(-40.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  struct Case {
    ActivationFn f;
    std::function<double(double)> ref;
  };
  const Case cases[] = {{ActivationFn::kRelu, [](double v) { return v > 0 ? v : 0; }},
                        {ActivationFn::kTanh, [](double v) { return std::tanh(v); }},
                        {ActivationFn::kSigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }},
                        {ActivationFn::kGelu, GeluRef}};
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.f));
    std::vector<float> y(n);
    backend_->Activate(c.f, n, x.data(), y.data());
    for (int64_t i = 0; i < n; ++i) {
      const double want = c.ref(x[i]);
      ASSERT_NEAR(y[i], want, 1e-6 + 1e-6 * std::fabs(want)) << "x=" << x[i];
    }
    // In place gives the same.
    std::vector<float> z = x;
    backend_->Activate(c.f, n, z.data(), z.data());
    EXPECT_EQ(z, y);
  }
}

TEST_P(BackendConformanceTest, ActivationGradientsMatchFiniteDifferences) {
  const int64_t n = 400;
  const std::vector<float> x = Random(n, 32, -4.0f, 4.0f);
  const std::vector<float> dy = Random(n, 33);
  for (ActivationFn f :
       {ActivationFn::kRelu, ActivationFn::kTanh, ActivationFn::kSigmoid, ActivationFn::kGelu}) {
    SCOPED_TRACE(static_cast<int>(f));
    std::vector<float> y(n), grad = dy;
    backend_->Activate(f, n, x.data(), y.data());
    backend_->ActivateGrad(f, n, x.data(), y.data(), grad.data());
    // Central differences of the backend's own forward pass, step 1e-2.
    std::vector<float> up = x, down = x;
    for (int64_t i = 0; i < n; ++i) {
      up[i] += 1e-2f;
      down[i] -= 1e-2f;
    }
    std::vector<float> y_up(n), y_down(n);
    backend_->Activate(f, n, up.data(), y_up.data());
    backend_->Activate(f, n, down.data(), y_down.data());
    for (int64_t i = 0; i < n; ++i) {
      if (f == ActivationFn::kRelu && std::fabs(x[i]) < 2e-2f) continue;  // the kink
      const double numeric = dy[i] * (static_cast<double>(y_up[i]) - y_down[i]) /
                             (static_cast<double>(up[i]) - down[i]);
      EXPECT_NEAR(grad[i], numeric, 2e-4) << "x=" << x[i];
    }
  }
}

double MeanRegression(Backend* b, RegressionLossFn f, float delta, int64_t rows, int64_t cols,
                      const std::vector<float>& out, const std::vector<int32_t>& labels) {
  double loss = 0;
  int64_t correct = 0;
  b->RegressionLoss(f, delta, rows, cols, out.data(), labels.data(), nullptr, &loss, &correct);
  return loss / rows;
}

TEST_P(BackendConformanceTest, RegressionLossHandValues) {
  // Two rows, 3 classes: errors against one-hot (label 2, label 0).
  const std::vector<float> out = {0.5f, -1.0f, 3.0f, /**/ 0.2f, 0.1f, 0.0f};
  const std::vector<int32_t> labels = {2, 0};
  std::vector<float> grad(6);
  double loss = 0;
  int64_t correct = 0;
  backend_->RegressionLoss(RegressionLossFn::kMse, 1.0f, 2, 3, out.data(), labels.data(),
                           grad.data(), &loss, &correct);
  // Row 0: e = (0.5, -1, 2) -> (0.25 + 1 + 4) / 3; row 1: e = (-0.8, 0.1, 0).
  EXPECT_NEAR(loss, 5.25 / 3 + 0.65 / 3, 1e-6);
  EXPECT_EQ(correct, 2);
  EXPECT_NEAR(grad[2], 2 * 2.0 / 6, 1e-6);
  EXPECT_NEAR(grad[3], 2 * -0.8 / 6, 1e-6);
  backend_->RegressionLoss(RegressionLossFn::kHuber, 1.0f, 2, 3, out.data(), labels.data(),
                           grad.data(), &loss, &correct);
  // Row 0: 0.125, 0.5, 1 * (2 - 0.5); row 1: 0.32, 0.005, 0.
  EXPECT_NEAR(loss, (0.125 + 0.5 + 1.5) / 3 + (0.32 + 0.005) / 3, 1e-6);
  EXPECT_NEAR(grad[2], 1.0 / 6, 1e-6);   // clipped at delta
  EXPECT_NEAR(grad[1], -1.0 / 6, 1e-6);  // |e| == delta: still quadratic
  EXPECT_NEAR(grad[3], -0.8 / 6, 1e-6);
  // One output: the target is the 0/1 label; >= 0.5 predicts 1.
  const std::vector<float> single = {0.7f, 0.2f, 0.5f};
  const std::vector<int32_t> binary = {1, 1, 0};
  std::vector<float> g1(3);
  backend_->RegressionLoss(RegressionLossFn::kMse, 1.0f, 3, 1, single.data(), binary.data(),
                           g1.data(), &loss, &correct);
  EXPECT_NEAR(loss, 0.09 + 0.64 + 0.25, 1e-6);
  EXPECT_EQ(correct, 1);
  EXPECT_NEAR(g1[1], 2 * -0.8 / 3, 1e-6);
}

TEST_P(BackendConformanceTest, RegressionLossGradientsMatchFiniteDifferences) {
  const int64_t rows = 6, cols = 4;
  std::vector<float> out = Random(rows * cols, 41, -2.0f, 2.0f);
  const std::vector<int32_t> labels = {0, 3, 1, 1, 2, 0};
  for (RegressionLossFn f : {RegressionLossFn::kMse, RegressionLossFn::kHuber}) {
    const float delta = 0.7f;
    std::vector<float> grad(rows * cols);
    double loss = 0;
    int64_t correct = 0;
    backend_->RegressionLoss(f, delta, rows, cols, out.data(), labels.data(), grad.data(), &loss,
                             &correct);
    EXPECT_NEAR(MeanRegression(backend_.get(), f, delta, rows, cols, out, labels), loss / rows,
                1e-12);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float x = out[i];
      const float plus = x + 1e-3f, minus = x - 1e-3f;
      out[i] = plus;
      const double up = MeanRegression(backend_.get(), f, delta, rows, cols, out, labels);
      out[i] = minus;
      const double down = MeanRegression(backend_.get(), f, delta, rows, cols, out, labels);
      out[i] = x;
      EXPECT_NEAR(grad[i], (up - down) / (static_cast<double>(plus) - minus), 1e-5)
          << "loss " << static_cast<int>(f) << " element " << i;
    }
  }
}

// Direct convolution in double: out[b, oy, ox, f] = sum over the window and
// channels of x * w (padding reads zeros).
std::vector<double> NaiveConv(const Window2d& g, int64_t filters, const std::vector<float>& x,
                              const std::vector<float>& w) {
  std::vector<double> out(g.patches() * filters, 0.0);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t oy = 0; oy < g.out_h; ++oy)
      for (int64_t ox = 0; ox < g.out_w; ++ox)
        for (int64_t f = 0; f < filters; ++f) {
          double s = 0;
          for (int64_t ky = 0; ky < g.window_h; ++ky)
            for (int64_t kx = 0; kx < g.window_w; ++kx) {
              const int64_t iy = oy * g.stride_h - g.pad_top + ky;
              const int64_t ix = ox * g.stride_w - g.pad_left + kx;
              if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
              for (int64_t c = 0; c < g.channels; ++c) {
                s += static_cast<double>(x[((b * g.height + iy) * g.width + ix) * g.channels + c]) *
                     w[((ky * g.window_w + kx) * g.channels + c) * filters + f];
              }
            }
          out[((b * g.out_h + oy) * g.out_w + ox) * filters + f] = s;
        }
  return out;
}

TEST_P(BackendConformanceTest, Im2ColTimesKernelIsTheConvolution) {
  uint32_t seed = 50;
  for (const Window2d& g : Geometries(3)) {
    SCOPED_TRACE(Describe(g));
    const int64_t filters = 4;
    const std::vector<float> x = Random(g.batch * g.height * g.width * g.channels, seed++);
    const std::vector<float> w = Random(g.patch_size() * filters, seed++);
    std::vector<float> cols(g.patches() * g.patch_size(), std::nanf(""));
    backend_->Im2Col(g, x.data(), cols.data());
    std::vector<float> out(g.patches() * filters);
    backend_->Gemm(false, false, g.patches(), filters, g.patch_size(), 1.0f, cols.data(), w.data(),
                   0.0f, out.data());
    const std::vector<double> want = NaiveConv(g, filters, x, w);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-5) << i;
  }
}

TEST_P(BackendConformanceTest, Col2ImIsTheAdjointOfIm2Col) {
  uint32_t seed = 60;
  for (const Window2d& g : Geometries(2)) {
    SCOPED_TRACE(Describe(g));
    const std::vector<float> x = Random(g.batch * g.height * g.width * g.channels, seed++);
    const std::vector<float> c = Random(g.patches() * g.patch_size(), seed++);
    std::vector<float> cols(c.size()), dx(x.size(), std::nanf(""));
    backend_->Im2Col(g, x.data(), cols.data());
    backend_->Col2Im(g, c.data(), dx.data());
    // <Im2Col(x), c> == <x, Col2Im(c)>.
    EXPECT_NEAR(Dot(cols, c), Dot(x, dx), 1e-4);
  }
  // By hand: a 1x1x3x1 image, window 1x2, stride 1, valid: patches (0,1),
  // (1,2); the middle element receives both.
  const Window2d g = MakeWindow(1, 1, 3, 1, 1, 2, 1, 1, false);
  const std::vector<float> c = {1, 2, 3, 4};
  std::vector<float> dx(3);
  backend_->Col2Im(g, c.data(), dx.data());
  EXPECT_THAT(dx, ElementsAre(1, 5, 4));
}

TEST_P(BackendConformanceTest, PoolingMatchesItsDefinition) {
  uint32_t seed = 70;
  for (const Window2d& g : Geometries(3)) {
    SCOPED_TRACE(Describe(g));
    const std::vector<float> x = Random(g.batch * g.height * g.width * g.channels, seed++);
    const int64_t n_out = g.patches() * g.channels;
    std::vector<float> max_y(n_out), avg_y(n_out);
    std::vector<int32_t> arg(n_out);
    backend_->MaxPool(g, x.data(), max_y.data(), arg.data());
    backend_->AvgPool(g, x.data(), avg_y.data());
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t oy = 0; oy < g.out_h; ++oy)
        for (int64_t ox = 0; ox < g.out_w; ++ox)
          for (int64_t c = 0; c < g.channels; ++c) {
            double best = -std::numeric_limits<double>::infinity(), sum = 0;
            int64_t count = 0, best_at = -1;
            for (int64_t ky = 0; ky < g.window_h; ++ky)
              for (int64_t kx = 0; kx < g.window_w; ++kx) {
                const int64_t iy = oy * g.stride_h - g.pad_top + ky;
                const int64_t ix = ox * g.stride_w - g.pad_left + kx;
                if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
                const int64_t at = ((b * g.height + iy) * g.width + ix) * g.channels + c;
                if (x[at] > best) {
                  best = x[at];
                  best_at = at;
                }
                sum += x[at];
                ++count;
              }
            const int64_t o = ((b * g.out_h + oy) * g.out_w + ox) * g.channels + c;
            ASSERT_EQ(max_y[o], static_cast<float>(best)) << o;
            ASSERT_EQ(arg[o], best_at) << o;
            ASSERT_NEAR(avg_y[o], sum / count, 1e-6) << o;  // padding not counted
          }
  }
}

TEST_P(BackendConformanceTest, PoolingGradientsAreAdjoints) {
  uint32_t seed = 80;
  for (const Window2d& g : Geometries(2)) {
    SCOPED_TRACE(Describe(g));
    const std::vector<float> x = Random(g.batch * g.height * g.width * g.channels, seed++);
    const std::vector<float> dy = Random(g.patches() * g.channels, seed++);
    std::vector<float> y(dy.size()), dx(x.size(), std::nanf(""));
    std::vector<int32_t> arg(dy.size());
    // Average pooling is linear: <AvgPool(x), dy> == <x, AvgPoolGrad(dy)>.
    backend_->AvgPool(g, x.data(), y.data());
    backend_->AvgPoolGrad(g, dy.data(), dx.data());
    EXPECT_NEAR(Dot(y, dy), Dot(x, dx), 1e-4);
    // Max pooling is linear once its argmax is fixed; each dy lands on it.
    backend_->MaxPool(g, x.data(), y.data(), arg.data());
    std::fill(dx.begin(), dx.end(), std::nanf(""));
    backend_->MaxPoolGrad(g, dy.data(), arg.data(), dx.data());
    EXPECT_NEAR(Dot(y, dy), Dot(x, dx), 1e-4);
    std::vector<double> want(x.size(), 0.0);
    for (size_t o = 0; o < dy.size(); ++o) want[arg[o]] += dy[o];
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(dx[i], want[i], 1e-6) << i;
  }
}

TEST_P(BackendConformanceTest, DropoutIsDeterministicPerSeedAndScalesKeptValues) {
  const int64_t n = 20000;
  const float rate = 0.3f;
  const std::vector<float> x = Random(n, 90);
  std::vector<float> y(n), mask(n), y2(n), mask2(n), mask3(n), y3(n);
  backend_->Dropout(n, rate, 1234, x.data(), y.data(), mask.data());
  backend_->Dropout(n, rate, 1234, x.data(), y2.data(), mask2.data());
  backend_->Dropout(n, rate, 1235, x.data(), y3.data(), mask3.data());
  EXPECT_EQ(mask, mask2);
  EXPECT_EQ(y, y2);
  EXPECT_NE(mask, mask3);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = DropoutUniform(1234, static_cast<uint64_t>(i)) >= rate;
    ASSERT_EQ(mask[i], keep ? 1.0f / (1.0f - rate) : 0.0f) << i;
    ASSERT_EQ(y[i], x[i] * mask[i]) << i;
    dropped += keep ? 0 : 1;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, rate, 0.02);
  // Backward: dy *= mask.
  std::vector<float> dy(n, 2.0f);
  backend_->Multiply(n, mask.data(), dy.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dy[i], 2.0f * mask[i]);
}

TEST_P(BackendConformanceTest, BatchNormMatchesItsDefinition) {
  const int64_t rows = 37, channels = 5;
  const std::vector<float> x = Random(rows * channels, 100, -3.0f, 5.0f);
  const std::vector<float> gamma = Random(channels, 101, 0.5f, 2.0f);
  const std::vector<float> beta = Random(channels, 102);
  const float eps = 1e-3f;
  std::vector<float> y(x.size()), xhat(x.size()), mean(channels), var(channels), inv(channels);
  backend_->BatchNormTrain(rows, channels, x.data(), gamma.data(), beta.data(), eps, y.data(),
                           xhat.data(), mean.data(), var.data(), inv.data());
  for (int64_t c = 0; c < channels; ++c) {
    double m = 0, v = 0;
    for (int64_t r = 0; r < rows; ++r) m += x[r * channels + c];
    m /= rows;
    for (int64_t r = 0; r < rows; ++r) v += (x[r * channels + c] - m) * (x[r * channels + c] - m);
    v /= rows;  // biased
    EXPECT_NEAR(mean[c], m, 1e-5);
    EXPECT_NEAR(var[c], v, 1e-4);
    EXPECT_NEAR(inv[c], 1 / std::sqrt(v + eps), 1e-4);
    for (int64_t r = 0; r < rows; ++r) {
      const double h = (x[r * channels + c] - m) / std::sqrt(v + eps);
      ASSERT_NEAR(xhat[r * channels + c], h, 1e-4);
      ASSERT_NEAR(y[r * channels + c], gamma[c] * h + beta[c], 1e-4);
    }
  }
  // Inference with the batch's own statistics gives the training output.
  std::vector<float> y_infer(x.size());
  backend_->BatchNormInfer(rows, channels, x.data(), gamma.data(), beta.data(), mean.data(),
                           var.data(), eps, y_infer.data());
  EXPECT_THAT(y_infer, Pointwise(FloatNear(1e-4f), y));
}

TEST_P(BackendConformanceTest, BatchNormGradientsMatchFiniteDifferences) {
  const int64_t rows = 9, channels = 3;
  std::vector<float> x = Random(rows * channels, 110, -2.0f, 2.0f);
  std::vector<float> gamma = Random(channels, 111, 0.5f, 1.5f);
  std::vector<float> beta = Random(channels, 112);
  const std::vector<float> w = Random(rows * channels, 113);  // L = sum(w * y), dy = w
  const float eps = 1e-3f;
  auto loss = [&]() {
    std::vector<float> y(x.size()), xhat(x.size()), m(channels), v(channels), inv(channels);
    backend_->BatchNormTrain(rows, channels, x.data(), gamma.data(), beta.data(), eps, y.data(),
                             xhat.data(), m.data(), v.data(), inv.data());
    return Dot(w, y);
  };
  std::vector<float> y(x.size()), xhat(x.size()), m(channels), v(channels), inv(channels);
  backend_->BatchNormTrain(rows, channels, x.data(), gamma.data(), beta.data(), eps, y.data(),
                           xhat.data(), m.data(), v.data(), inv.data());
  std::vector<float> dx(x.size()), dgamma(channels), dbeta(channels);
  backend_->BatchNormGrad(rows, channels, xhat.data(), gamma.data(), inv.data(), w.data(),
                          dx.data(), dgamma.data(), dbeta.data());
  auto check = [&](std::vector<float>* values, const std::vector<float>& grad, const char* what) {
    for (size_t i = 0; i < values->size(); ++i) {
      const float saved = (*values)[i];
      const float plus = saved + 1e-2f, minus = saved - 1e-2f;
      (*values)[i] = plus;
      const double up = loss();
      (*values)[i] = minus;
      const double down = loss();
      (*values)[i] = saved;
      const double numeric = (up - down) / (static_cast<double>(plus) - minus);
      EXPECT_NEAR(grad[i], numeric, 2e-3 + 1e-2 * std::fabs(numeric)) << what << "[" << i << "]";
    }
  };
  check(&x, dx, "x");
  check(&gamma, dgamma, "gamma");
  check(&beta, dbeta, "beta");
}

TEST_P(BackendConformanceTest, NewOpsOnEmptyInputsAreNoOps) {
  double loss = -1;
  int64_t correct = -1;
  backend_->RegressionLoss(RegressionLossFn::kMse, 1.0f, 0, 3, nullptr, nullptr, nullptr, &loss,
                           &correct);
  EXPECT_EQ(loss, 0.0);
  EXPECT_EQ(correct, 0);
  backend_->Activate(ActivationFn::kGelu, 0, nullptr, nullptr);
  backend_->ActivateGrad(ActivationFn::kGelu, 0, nullptr, nullptr, nullptr);
  backend_->Dropout(0, 0.5f, 1, nullptr, nullptr, nullptr);
  backend_->Multiply(0, nullptr, nullptr);
  Window2d g = MakeWindow(0, 4, 4, 2, 2, 2, 2, 2, false);
  backend_->Im2Col(g, nullptr, nullptr);
  backend_->Col2Im(g, nullptr, nullptr);
  backend_->MaxPool(g, nullptr, nullptr, nullptr);
  backend_->AvgPool(g, nullptr, nullptr);
}

}  // namespace
}  // namespace pscluster
