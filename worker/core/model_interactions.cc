#include "worker/core/model_interactions.h"

#include <algorithm>

namespace pscluster {

void CrossForward(Backend* backend, int64_t n, int64_t d, const float* x0, const float* x,
                  const float* w, const float* b, float* u, float* y) {
  backend->Gemm(false, false, n, d, d, 1.0f, x, w, 0.0f, u);
  backend->AddBias(n, d, b, u);
  const int64_t size = n * d;
  for (int64_t i = 0; i < size; ++i) y[i] = x0[i] * u[i] + x[i];
}

void CrossBackward(Backend* backend, int64_t n, int64_t d, const float* x0, const float* x,
                   const float* w, const float* u, const float* dy, float* du, float* dw,
                   float* db, float* dx, float* dx0) {
  const int64_t size = n * d;
  for (int64_t i = 0; i < size; ++i) du[i] = dy[i] * x0[i];
  if (dx0 != nullptr) {
    for (int64_t i = 0; i < size; ++i) dx0[i] += dy[i] * u[i];
  }
  backend->Gemm(true, false, d, d, n, 1.0f, x, du, 0.0f, dw);
  backend->BiasGrad(n, d, du, db);
  if (dx == nullptr) return;
  backend->Gemm(false, true, n, d, d, 1.0f, du, w, 0.0f, dx);
  for (int64_t i = 0; i < size; ++i) dx[i] += dy[i];
}

void LowRankCrossForward(Backend* backend, int64_t n, int64_t d, int64_t r, const float* x0,
                         const float* x, const float* w_u, const float* w_v, const float* b,
                         float* t, float* u, float* y) {
  backend->Gemm(false, false, n, r, d, 1.0f, x, w_u, 0.0f, t);
  backend->Gemm(false, false, n, d, r, 1.0f, t, w_v, 0.0f, u);
  backend->AddBias(n, d, b, u);
  const int64_t size = n * d;
  for (int64_t i = 0; i < size; ++i) y[i] = x0[i] * u[i] + x[i];
}

void LowRankCrossBackward(Backend* backend, int64_t n, int64_t d, int64_t r, const float* x0,
                          const float* x, const float* w_u, const float* w_v, const float* t,
                          const float* u, const float* dy, float* du, float* dt, float* dw_u,
                          float* dw_v, float* db, float* dx, float* dx0) {
  const int64_t size = n * d;
  for (int64_t i = 0; i < size; ++i) du[i] = dy[i] * x0[i];
  if (dx0 != nullptr) {
    for (int64_t i = 0; i < size; ++i) dx0[i] += dy[i] * u[i];
  }
  backend->Gemm(true, false, r, d, n, 1.0f, t, du, 0.0f, dw_v);
  backend->BiasGrad(n, d, du, db);
  backend->Gemm(false, true, n, r, d, 1.0f, du, w_v, 0.0f, dt);
  backend->Gemm(true, false, d, r, n, 1.0f, x, dt, 0.0f, dw_u);
  if (dx == nullptr) return;
  backend->Gemm(false, true, n, d, r, 1.0f, dt, w_u, 0.0f, dx);
  for (int64_t i = 0; i < size; ++i) dx[i] += dy[i];
}

void FmForward(int64_t n, int64_t width, const std::vector<int64_t>& columns, int64_t k,
               const float* x0, float* out) {
  for (int64_t e = 0; e < n; ++e) {
    const float* row = x0 + e * width;
    double term = 0;
    for (int64_t d = 0; d < k; ++d) {
      double sum = 0, squares = 0;
      for (int64_t c : columns) {
        const double v = row[c + d];
        sum += v;
        squares += v * v;
      }
      term += sum * sum - squares;
    }
    out[e] += static_cast<float>(0.5 * term);
  }
}

void FmBackward(int64_t n, int64_t width, const std::vector<int64_t>& columns, int64_t k,
                const float* x0, const float* g, float* dx0) {
  for (int64_t e = 0; e < n; ++e) {
    const float* row = x0 + e * width;
    float* drow = dx0 + e * width;
    for (int64_t d = 0; d < k; ++d) {
      float sum = 0;
      for (int64_t c : columns) sum += row[c + d];
      for (int64_t c : columns) drow[c + d] += g[e] * (sum - row[c + d]);
    }
  }
}

void DotInteractionForward(int64_t n, int64_t k, const float* bottom, int64_t width,
                           const std::vector<int64_t>& columns, const float* x0, float* y) {
  const int64_t vectors = static_cast<int64_t>(columns.size()) + 1;
  const int64_t out = k + vectors * (vectors - 1) / 2;
  std::vector<const float*> z(vectors);
  for (int64_t e = 0; e < n; ++e) {
    z[0] = bottom + e * k;
    for (int64_t f = 1; f < vectors; ++f) z[f] = x0 + e * width + columns[f - 1];
    float* row = y + e * out;
    std::copy(z[0], z[0] + k, row);
    int64_t p = k;
    for (int64_t i = 0; i < vectors; ++i) {
      for (int64_t j = i + 1; j < vectors; ++j) {
        float dot = 0;
        for (int64_t d = 0; d < k; ++d) dot += z[i][d] * z[j][d];
        row[p++] = dot;
      }
    }
  }
}

void DotInteractionBackward(int64_t n, int64_t k, const float* bottom, int64_t width,
                            const std::vector<int64_t>& columns, const float* x0,
                            const float* dy, float* dbottom, float* dx0) {
  const int64_t vectors = static_cast<int64_t>(columns.size()) + 1;
  const int64_t out = k + vectors * (vectors - 1) / 2;
  std::vector<const float*> z(vectors);
  std::vector<float*> dz(vectors);
  for (int64_t e = 0; e < n; ++e) {
    z[0] = bottom + e * k;
    dz[0] = dbottom + e * k;
    for (int64_t f = 1; f < vectors; ++f) {
      z[f] = x0 + e * width + columns[f - 1];
      dz[f] = dx0 + e * width + columns[f - 1];
    }
    const float* drow = dy + e * out;
    std::copy(drow, drow + k, dz[0]);
    int64_t p = k;
    for (int64_t i = 0; i < vectors; ++i) {
      for (int64_t j = i + 1; j < vectors; ++j) {
        const float g = drow[p++];
        for (int64_t d = 0; d < k; ++d) {
          dz[i][d] += g * z[j][d];
          dz[j][d] += g * z[i][d];
        }
      }
    }
  }
}

}  // namespace pscluster
