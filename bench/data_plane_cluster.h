// The servers, connections and round trips of data_plane_bench
// (bench/data_plane_bench.cc, bench/README.md): for one cluster shape (P
// servers x W workers), P servers of each path in this process (echo,
// pscluster PS), raw TCP ping-pong pairs, ps-lite's cluster as child
// processes (bench/pslite_launcher.h), and each worker's connections and
// prebuilt requests. Benchmark code, not a library for production.
//
// A Cluster is built once and then only read, except each worker's own
// Connections: RoundTrip may run concurrently for different workers, never
// twice at once for the same worker.
#ifndef PSCLUSTER_BENCH_DATA_PLANE_CLUSTER_H_
#define PSCLUSTER_BENCH_DATA_PLANE_CLUSTER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/bench.grpc.pb.h"
#include "bench/pslite_launcher.h"
#include "bench/tcp_ping_pong.h"
#include "protos/ps.pb.h"
#include "ps/core/job_stores.h"
#include "ps/service/data_plane_server.h"
#include "ps/service/remote_ps_client.h"
#include "ps/service/ps_service.h"
#include "rpc/rpc_util.h"
#include "rpc/tls_stream.h"

namespace pscluster {
namespace bench {

// Bound on every call of every path (RPC deadline, socket timeout), so a
// stuck server fails its point instead of hanging the benchmark.
inline constexpr std::chrono::seconds kCallTimeout{300};

// Bounds of --clusters: each PxW shape runs W*P raw TCP server threads.
inline constexpr int kMaxPs = 16;
inline constexpr int kMaxWorkers = 16;

// ---------------------------------------------------------------------------
// Naive gRPC: unary Echo with a protobuf `bytes` payload.

class EchoServiceImpl final : public bench::EchoService::Service {
 public:
  grpc::Status Echo(grpc::ServerContext*, const bench::BytesMessage* request,
                    bench::BytesMessage* response) override {
    *response->mutable_data() = request->data();
    return grpc::Status::OK;
  }
};

// ---------------------------------------------------------------------------
// Cluster shapes.

enum Path {
  kRawTcp = 0,
  kNaiveGrpc = 1,
  kPscluster = 2,
  kPsclusterTwoCalls = 3,
  kPslitePushPull = 4,  // ZPush, Wait, ZPull, Wait.
  kPsliteFused = 5,     // ZPushPull, Wait.
  kPsclusterStriped = 6,
  kPsclusterGrpc = 7,  // as kPscluster, with Pull and Push on gRPC (no data plane)
  // As kPscluster, on a second data plane of the same PS speaking mutual TLS
  // (rpc/tls_stream.h), driven with frames as DataPlaneClient drives them.
  kPsclusterTls = 8,
  kNumPaths = 9,
};
inline constexpr const char* kPathNames[kNumPaths] = {
    "raw_tcp",          "naive_grpc",   "pscluster",         "pscluster_two_calls",
    "pslite_push_pull", "pslite_fused", "pscluster_striped", "pscluster_grpc",
    "pscluster_tls"};

inline bool IsPslite(int path) { return path == kPslitePushPull || path == kPsliteFused; }

struct ClusterShape {
  int ps = 1;
  int workers = 1;
  std::string label;  // "2x2", as in --clusters and the JSON.
};

// "PxW" with 1 <= P <= kMaxPs and 1 <= W <= kMaxWorkers; false otherwise.
bool ParseShape(const std::string& text, ClusterShape* shape);

// A PS's part of one size's variable, with every path's request for it,
// built before timing starts and only read by the workers.
struct Shard {
  int64_t bytes = 0;
  std::string payload;  // For raw TCP.
  bench::BytesMessage echo_request;
  PushRequest push_pull;  // The gradient, and a pull of the same variable.
  PushRequest push;       // The gradient alone, for the two calls.
  PullRequest pull;
  // --stripes: the shard as K variables, one fused request each.
  std::vector<PushRequest> stripes;
  int64_t stripe_bytes = 0;  // Of all K.
};

// What one worker keeps across its calls to one server.
struct Connection {
  std::unique_ptr<TcpPingPong> tcp;
  std::string tcp_reply;
  std::unique_ptr<bench::EchoService::Stub> echo_stub;
  std::unique_ptr<RemotePsClient> ps_client;
  // The same PS with RemotePsClient::Options::data_plane off.
  std::unique_ptr<RemotePsClient> grpc_client;
  PushResponse grpc_pushed;
  // pscluster's responses, kept across calls as worker/core/trainer.cc keeps
  // its per-PS ones: the sub-messages holding tensors are `optional`, so the
  // Clear() of every parse keeps them and their buffers.
  PushResponse pushed;
  PullResponse pulled;
  // --stripes: K more channels (TCP connections) to the same PS.
  std::vector<std::unique_ptr<RemotePsClient>> stripe_clients;
  std::vector<PushResponse> stripe_pushed;
  // The PS's TLS data plane, with a 'worker' certificate, and its answers.
  std::unique_ptr<TlsStream> tls;
  PushResponse tls_pushed;
};

// One shape's servers and connections, kept for the whole run so repeats
// interleave shapes without reconnecting. Member order matters: servers are
// destroyed (shut down) before the services and stores they serve.
struct Cluster {
  ClusterShape shape;
  std::vector<std::unique_ptr<EchoServiceImpl>> echo_services;
  std::vector<std::unique_ptr<RunningServer>> echo_servers;
  std::vector<std::unique_ptr<JobStores>> stores;
  std::vector<std::unique_ptr<ParameterServerService>> ps_services;
  std::vector<std::unique_ptr<RunningServer>> ps_servers;
  // Each PS's raw data plane (ps/service/data_plane_server.h), as ps_server
  // starts it.
  std::vector<std::unique_ptr<DataPlaneServer>> data_planes;
  // A second data plane per PS, over mutual TLS (certificates made in
  // memory, rpc/test_certs.h), for kPsclusterTls.
  std::vector<std::unique_ptr<DataPlaneServer>> tls_data_planes;
  // ps-lite's cluster of the same shape (child processes), if --pslite_bench.
  std::unique_ptr<PsliteLauncher> pslite;
  // [worker * shape.ps + ps]: each worker has its own connections to every
  // server, as separate worker processes would (MakeChannel gives each
  // channel its own subchannel pool, so its own TCP connection).
  std::vector<Connection> connections;
  // [size index][ps].
  std::vector<std::vector<Shard>> shards;

  Connection& connection(int worker, int ps) { return connections[worker * shape.ps + ps]; }
};

// Starts P servers of each kind and W*P connections of each path, and
// creates one variable "w_<N>" per size on each PS (its shard: N/P bytes;
// with stripes > 1 also K variables "w_<N>_s<k>" of 1/K of it). With a
// non-empty `pslite_bench`, also starts ps-lite's cluster of the same shape.
// Errors: the status of the server, connection or call that failed.
absl::StatusOr<std::unique_ptr<Cluster>> StartCluster(const ClusterShape& shape,
                                                      const std::vector<int64_t>& sizes,
                                                      int tcp_buffer_bytes, int stripes,
                                                      const std::string& pslite_bench);

// One round trip of `worker` on `path`: each PS gets its shard and sends it
// back (echo, ping-pong, or pushed and pulled). raw TCP and pscluster (fused
// and striped) start on every PS before waiting for any, as a worker's step
// does; naive gRPC and two calls go PS by PS.
// REQUIRES: !IsPslite(path) (ps-lite's round trips run in its own processes).
absl::Status RoundTrip(Cluster& c, Path path, size_t size_index, int worker);

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_DATA_PLANE_CLUSTER_H_
