// scale_bench's PS-side modes (bench/scale_bench.cc) and the /proc readings
// every mode takes. Benchmark code, not a library for production.
//
//   ps_connections  a real ps_server child (--ps_server_bin) and, from this
//                   process, clients added in steps (--connections): each is
//                   a RemotePsClient with its own gRPC channel that makes one
//                   Pull of a 4-float variable and then stays idle, as a
//                   worker's connection to a PS between steps. Series
//                   "data_plane" (the default client: gRPC channel + one
//                   data-plane connection, parked in the PS's epoll set and
//                   served by its thread pool) and "grpc_only" (data_plane
//                   off). Per step: the child's VmRSS and threads, and how
//                   many clients' pulls failed (the data plane closes
//                   connections past max_connections, 16,384, or what
//                   RLIMIT_NOFILE allows).
//   push_pull       data_plane_cluster's in-process PS servers, P PS x W
//                   workers (--push_pull_shapes), each worker running fused
//                   push+pull round trips of a tiny variable (4 KiB split
//                   over the PS) concurrently: p50/p99 per round trip.
#ifndef PSCLUSTER_BENCH_SCALE_PS_H_
#define PSCLUSTER_BENCH_SCALE_PS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pscluster {
namespace bench {

// User + system CPU seconds of process `pid` (getrusage for this process).
double ProcessCpuSeconds(pid_t pid);
// The calling thread's CPU seconds.
double ThreadCpuSeconds();
// "Threads:" and VmRSS (bytes) of /proc/<pid>/status; -1 when unreadable.
int ThreadsOf(pid_t pid);
int64_t RssOf(pid_t pid);
// /proc/loadavg's three load averages, "0.52 0.61 0.70".
std::string LoadAverage();

// The modes; return scale_bench's exit code.
int RunPsConnectionsMode(bool quick, const std::string& output_json);
int RunPushPullMode(bool quick, const std::string& output_json);

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_SCALE_PS_H_
