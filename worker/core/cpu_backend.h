// The CPU Backend: OpenBLAS sgemm for Gemm (and so for conv2d, as im2col +
// Gemm), plain loops for the rest (cpu_kernels.h).
//
// Thread-safety: the returned object holds no state, but like every Backend
// it is meant to be used by one thread at a time.
#ifndef PSCLUSTER_WORKER_CORE_CPU_BACKEND_H_
#define PSCLUSTER_WORKER_CORE_CPU_BACKEND_H_

#include <memory>

#include "worker/core/backend.h"

namespace pscluster {

// Always succeeds. name() is "cpu (OpenBLAS)".
std::unique_ptr<Backend> CreateCpuBackend();

// Threads OpenBLAS uses for one Gemm, process-wide (its default: one per
// core). Idle OpenBLAS threads spin (sched_yield) for a while after each
// call, so workers that share a machine with other workers and PS should
// use fewer. n < 1 keeps the default.
void SetCpuComputeThreads(int n);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_CPU_BACKEND_H_
