// The feature-interaction ops of recommendation models, built on a Backend's
// GEMMs plus elementwise loops on the host (every Backend takes host
// pointers, so these run unchanged on the CPU and the CUDA backend):
//
//  - the DCN-v2 cross layer (Wang et al. 2021, "DCN V2"):
//      y = x0 * (x W + b) + x
//    with x0 the model's input [dense | embeddings], x the layer's input
//    (x0 itself for the first cross layer), W [d, d], b [d], and * the
//    elementwise product, or its low-rank form W = U V (U [d, r], V [r, d]).
//    Its gradient reaches both x and x0.
//  - the factorization machine's second-order term (DeepFM, Guo et al.
//    2017) over F embeddings v_f of one dim k:
//      fm = 0.5 * sum_d [(sum_f v_fd)^2 - sum_f v_fd^2]
//    (the sum of the pairwise dot products <v_f, v_g>, f < g), a scalar per
//    example added to the logit.
//  - DLRM's dot interaction (Naumov et al. 2019) of the bottom MLP's
//    output z0 [k] and the F embeddings z1..zF [k]:
//      y = [z0 | <zi, zj> for 0 <= i < j <= F]  (k + (F+1)F/2 values,
//      pairs in order (0,1), (0,2), ..., (0,F), (1,2), ...).
//
// All matrices are row-major [n, d]. Thread-compatible: no state.
#ifndef PSCLUSTER_WORKER_CORE_MODEL_INTERACTIONS_H_
#define PSCLUSTER_WORKER_CORE_MODEL_INTERACTIONS_H_

#include <cstdint>
#include <vector>

#include "worker/core/backend.h"

namespace pscluster {

// Forward: u = x W + b (kept for the backward pass) and y = x0 * u + x.
// REQUIRES: x0, x, u, y each [n, d]; y does not alias x0 or x; u aliases
// nothing.
void CrossForward(Backend* backend, int64_t n, int64_t d, const float* x0, const float* x,
                  const float* w, const float* b, float* u, float* y);

// The low-rank form, W = U V with U [d, r] and V [r, d]: t = x U (kept,
// [n, r]), u = t V + b, y = x0 * u + x.
void LowRankCrossForward(Backend* backend, int64_t n, int64_t d, int64_t r, const float* x0,
                         const float* x, const float* w_u, const float* w_v, const float* b,
                         float* t, float* u, float* y);

// Its backward: as CrossBackward, with dv = tᵀ du, dt = du Vᵀ (into `dt`,
// [n, r] scratch), du_w = xᵀ dt, dx = dt Uᵀ + dy.
void LowRankCrossBackward(Backend* backend, int64_t n, int64_t d, int64_t r, const float* x0,
                          const float* x, const float* w_u, const float* w_v, const float* t,
                          const float* u, const float* dy, float* du, float* dt, float* dw_u,
                          float* dw_v, float* db, float* dx, float* dx0);

// Backward, given dy = d(loss)/dy [n, d] and u from CrossForward:
//   du = dy * x0 (into `du`, [n, d] scratch),
//   dw = xᵀ du and db = column sums of du (both overwritten),
//   dx = du Wᵀ + dy (overwritten; skipped when dx is null),
//   dx0 += dy * u (accumulated over the cross layers; skipped when null).
// REQUIRES: dx, du and dx0 are distinct from each other and from dy.
void CrossBackward(Backend* backend, int64_t n, int64_t d, const float* x0, const float* x,
                   const float* w, const float* u, const float* dy, float* du, float* dw,
                   float* db, float* dx, float* dx0);

// fm of each example added to out[e]: the embeddings of example e are
// x0[e * width + columns[f] + d] for d in [0, k).
// REQUIRES: x0 [n, width]; out [n]; each columns[f] + k <= width.
void FmForward(int64_t n, int64_t width, const std::vector<int64_t>& columns, int64_t k,
               const float* x0, float* out);

// Backward of FmForward given g[e] = d(loss)/d(out[e]):
// dx0[e, columns[f] + d] += g[e] * (sum_f' v_f'd - v_fd).
void FmBackward(int64_t n, int64_t width, const std::vector<int64_t>& columns, int64_t k,
                const float* x0, const float* g, float* dx0);

// Forward: z0 is bottom[e * k ...], zf (f >= 1) is
// x0[e * width + columns[f - 1] ...]; y is [n, k + (F+1)F/2].
void DotInteractionForward(int64_t n, int64_t k, const float* bottom, int64_t width,
                           const std::vector<int64_t>& columns, const float* x0, float* y);

// Backward given dy [n, k + (F+1)F/2]: dbottom [n, k] (overwritten) and the
// embeddings' gradient added to dx0 [n, width] at their columns.
void DotInteractionBackward(int64_t n, int64_t k, const float* bottom, int64_t width,
                            const std::vector<int64_t>& columns, const float* x0,
                            const float* dy, float* dbottom, float* dx0);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_MODEL_INTERACTIONS_H_
