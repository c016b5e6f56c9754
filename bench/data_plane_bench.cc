// data_plane_bench: pscluster's dense data plane (a Push of one float32
// variable's gradient through GrpcPsClient to a real ParameterServerService,
// carrying a Pull of the same variable answered in the same round trip) measured
// against its two ceilings in one process run:
//   raw TCP     - blocking-socket ping-pong over 127.0.0.1;
//   naive gRPC  - a bare unary Echo(bytes) service, nothing tuned;
//   pscluster   - VariableStore + ParameterServerService + GrpcPsClient, the
//                 fused push+pull (PushRequest.pull) a worker sends each step;
//   pscluster two calls - the same with Push, then Pull: two RPCs.
// Each path sends N bytes and gets N bytes back per round trip, so its
// throughput is 2N / round-trip time (1 GB = 1e9 B).
//
// Cluster shapes (--clusters=PxW): P servers of each path and W worker
// threads running at once, each with its own connections to all P servers.
// A variable of N bytes is split into P shards of N/P bytes, one per server;
// a worker's round trip sends each server its shard and gets it back, one
// server after the other (as a worker's step does). All paths use the same
// connections and bytes, so 1x1 is the single-connection comparison and PxW
// shows what the paths do under a cluster's concurrency.
//
// Points are interleaved (repeat -> shape -> size -> path) and each cell is
// the median over repeats, so slow drift of a noisy machine hits all paths
// alike.
//
// All servers run in threads of this process on loopback; see README.md.
// Exit codes: 0 on success, 1 if a server cannot start or a call fails,
// 2 for invalid flags.
#include <prometheus/registry.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "bench/bench.grpc.pb.h"
#include "bench/bench_util.h"
#include "bench/tcp_ping_pong.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "ps/core/job_stores.h"
#include "ps/core/variable_store.h"
#include "ps/service/grpc_ps_client.h"
#include "ps/service/ps_service.h"
#include "rpc/rpc_util.h"

ABSL_FLAG(std::vector<std::string>, sizes,
          std::vector<std::string>({"4096", "65536", "1048576", "4194304", "16777216", "67108864"}),
          "Payload sizes N in bytes (float32, so multiples of 4), comma-separated.");
ABSL_FLAG(std::vector<std::string>, clusters, std::vector<std::string>({"1x1", "2x2"}),
          "Cluster shapes PxW, comma-separated: P servers of each path (P parameter servers) "
          "and W concurrent worker threads, each with its own connection to every server. "
          "Each variable of N bytes is split into P shards of N/P bytes.");
ABSL_FLAG(int, repeats, 5, "Interleaved repeats per point; each cell is their median.");
ABSL_FLAG(double, seconds_per_point, 1.0,
          "Time each (repeat, shape, size, path) point runs for; each worker does at least "
          "--min_iterations round trips, so slow round trips make a point run longer.");
ABSL_FLAG(int64_t, min_iterations, 1,
          "Round trips each worker does per point at least, however long they take.");
ABSL_FLAG(int64_t, max_iterations, 100000, "Cap on round trips per worker per point.");
ABSL_FLAG(int, tcp_buffer_bytes, 4 << 20,
          "SO_SNDBUF/SO_RCVBUF of the raw TCP sockets (the kernel doubles it); 0 leaves the "
          "kernel's autotuning alone.");
ABSL_FLAG(std::string, only_path, "",
          "If set (raw_tcp, naive_grpc, pscluster or pscluster_two_calls), only this path is "
          "timed (the others report nan): for profiling one path with perf.");
ABSL_FLAG(std::string, output_json, "", "If set, the results are also written here as JSON.");

namespace pscluster {
namespace {

using bench::TcpPingPong;

constexpr int kExitBadFlags = 2;

// Bound on every call of every path (RPC deadline, socket timeout), so a
// stuck server fails its point instead of hanging the benchmark.
constexpr std::chrono::seconds kCallTimeout{300};

// Bounds of --clusters: each PxW shape runs W*P raw TCP server threads.
constexpr int kMaxPs = 16;
constexpr int kMaxWorkers = 16;

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
  kNumPaths = 4,
};
constexpr const char* kPathNames[kNumPaths] = {"raw_tcp", "naive_grpc", "pscluster",
                                               "pscluster_two_calls"};

struct ClusterShape {
  int ps = 1;
  int workers = 1;
  std::string label;  // "2x2", as in --clusters and the JSON.
};

// "PxW" with 1 <= P <= kMaxPs and 1 <= W <= kMaxWorkers.
bool ParseShape(const std::string& text, ClusterShape* shape) {
  const std::vector<std::string> parts = absl::StrSplit(text, 'x');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &shape->ps) ||
      !absl::SimpleAtoi(parts[1], &shape->workers) || shape->ps < 1 || shape->ps > kMaxPs ||
      shape->workers < 1 || shape->workers > kMaxWorkers) {
    return false;
  }
  shape->label = absl::StrCat(shape->ps, "x", shape->workers);
  return true;
}

// A PS's part of one size's variable, with every path's request for it,
// built before timing starts and only read by the workers.
struct Shard {
  int64_t bytes = 0;
  std::string payload;  // For raw TCP.
  bench::BytesMessage echo_request;
  PushRequest push_pull;  // The gradient, and a pull of the same variable.
  PushRequest push;       // The gradient alone, for the two calls.
  PullRequest pull;
};

// What one worker keeps across its calls to one server.
struct Connection {
  std::unique_ptr<TcpPingPong> tcp;
  std::string tcp_reply;
  std::unique_ptr<bench::EchoService::Stub> echo_stub;
  std::unique_ptr<GrpcPsClient> ps_client;
  // pscluster's responses, kept across calls as worker/core/trainer.cc keeps
  // its per-PS ones: the sub-messages holding tensors are `optional`, so the
  // Clear() of every parse keeps them and their buffers.
  PushResponse pushed;
  PullResponse pulled;
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
  // [worker * shape.ps + ps]: each worker has its own connections to every
  // server, as separate worker processes would (MakeChannel gives each
  // channel its own subchannel pool, so its own TCP connection).
  std::vector<Connection> connections;
  // [size index][ps].
  std::vector<std::vector<Shard>> shards;

  Connection& connection(int worker, int ps) { return connections[worker * shape.ps + ps]; }
};

// Starts P servers of each kind and W*P connections of each path, and
// creates one variable "w_<N>" per size on each PS (its shard: N/P bytes).
absl::StatusOr<std::unique_ptr<Cluster>> StartCluster(const ClusterShape& shape,
                                                      const std::vector<int64_t>& sizes,
                                                      int tcp_buffer_bytes) {
  auto c = std::make_unique<Cluster>();
  c->shape = shape;
  const int num_ps = shape.ps;
  for (int p = 0; p < num_ps; ++p) {
    // Naive gRPC: the same StartServer/MakeChannel (message limits, health
    // service) as pscluster, so only the service differs.
    c->echo_services.push_back(std::make_unique<EchoServiceImpl>());
    auto echo_server = StartServer(ServerOptions(), {c->echo_services.back().get()}, nullptr);
    if (!echo_server.ok()) {
      return absl::Status(echo_server.status().code(),
                          absl::StrCat("echo server: ", echo_server.status().message()));
    }
    c->echo_servers.push_back(*std::move(echo_server));
    // pscluster: wired as ps/main.cc wires a ps_server, metrics included;
    // each PS has its own store and registry, as separate processes would.
    auto registry = std::make_shared<prometheus::Registry>();
    VariableStore::Options store_options;
    store_options.registry = registry;
    c->stores.push_back(std::make_unique<JobStores>(store_options));
    c->ps_services.push_back(
        std::make_unique<ParameterServerService>(c->stores.back().get(), registry));
    auto ps_server = StartServer(ServerOptions(), {c->ps_services.back().get()}, registry);
    if (!ps_server.ok()) {
      return absl::Status(ps_server.status().code(),
                          absl::StrCat("ps server: ", ps_server.status().message()));
    }
    c->ps_servers.push_back(*std::move(ps_server));
  }
  c->connections.resize(static_cast<size_t>(shape.workers * num_ps));
  for (int w = 0; w < shape.workers; ++w) {
    for (int p = 0; p < num_ps; ++p) {
      Connection& conn = c->connection(w, p);
      auto tcp = TcpPingPong::Create(tcp_buffer_bytes, kCallTimeout);
      if (!tcp.ok()) {
        return absl::Status(tcp.status().code(), absl::StrCat("raw TCP: ", tcp.status().message()));
      }
      conn.tcp = *std::move(tcp);
      conn.echo_stub = bench::EchoService::NewStub(
          MakeChannel(absl::StrCat("127.0.0.1:", c->echo_servers[p]->port())));
      GrpcPsClient::Options client_options;
      client_options.target = absl::StrCat("127.0.0.1:", c->ps_servers[p]->port());
      client_options.call_timeout = kCallTimeout;
      conn.ps_client = std::make_unique<GrpcPsClient>(client_options);
    }
  }

  // Requests are built once, outside the timing. The last shard would take
  // the remainder of an uneven split; sizes are whole shards instead (N/P
  // rounded down to 4 bytes), and throughput counts the bytes actually sent.
  c->shards.resize(sizes.size());
  std::vector<CreateVariablesRequest> creates(static_cast<size_t>(num_ps));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t shard_bytes = sizes[i] / num_ps / 4 * 4;
    const std::string name = absl::StrCat("w_", sizes[i]);
    c->shards[i].resize(static_cast<size_t>(num_ps));
    for (int p = 0; p < num_ps; ++p) {
      Shard& shard = c->shards[i][p];
      shard.bytes = shard_bytes;
      shard.payload.assign(static_cast<size_t>(shard_bytes), '\x5a');
      shard.echo_request.set_data(shard.payload);
      VariableSpecProto* spec = creates[p].add_variables();
      spec->set_name(name);
      spec->set_dtype(DT_FLOAT32);
      spec->add_shape(shard_bytes / 4);
      spec->mutable_initializer()->set_type("zeros");
      spec->mutable_optimizer()->set_type("sgd");
      spec->mutable_optimizer()->set_learning_rate(0.01f);
      NamedTensor* gradient = shard.push.add_gradients();
      gradient->set_name(name);
      EncodeTensor(Shape{shard_bytes / 4},
                   std::vector<float>(static_cast<size_t>(shard_bytes / 4), 1e-3f),
                   gradient->mutable_tensor());
      shard.pull.add_names(name);
      shard.push_pull = shard.push;
      *shard.push_pull.mutable_pull() = shard.pull;
    }
  }
  for (int p = 0; p < num_ps; ++p) {
    CreateVariablesResponse created;
    if (absl::Status s = c->connection(0, p).ps_client->CreateVariables(creates[p], &created);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("CreateVariables: ", s.message()));
    }
  }
  return c;
}

// ---------------------------------------------------------------------------
// Measurement.

absl::Status CheckPulled(const PullResponse& pulled, int64_t bytes, const char* what) {
  if (pulled.tensors_size() != 1 ||
      static_cast<int64_t>(pulled.tensors(0).tensor().data().size()) != bytes) {
    return absl::InternalError(absl::StrCat(what, " returned the wrong size"));
  }
  return absl::OkStatus();
}

// One round trip of `worker` on `path`: each PS in turn gets its shard and
// sends it back (echo, ping-pong, or pushed and pulled).
absl::Status RoundTrip(Cluster& c, Path path, size_t size_index, int worker) {
  for (int p = 0; p < c.shape.ps; ++p) {
    const Shard& shard = c.shards[size_index][p];
    Connection& conn = c.connection(worker, p);
    switch (path) {
      case kRawTcp: {
        if (absl::Status s = conn.tcp->RoundTrip(shard.payload, &conn.tcp_reply); !s.ok()) {
          return s;
        }
        break;
      }
      case kNaiveGrpc: {
        grpc::ClientContext context;
        SetDeadline(&context, kCallTimeout);
        bench::BytesMessage response;
        grpc::Status s = conn.echo_stub->Echo(&context, shard.echo_request, &response);
        if (!s.ok()) return FromGrpcStatus(s);
        if (static_cast<int64_t>(response.data().size()) != shard.bytes) {
          return absl::InternalError("echo returned the wrong size");
        }
        break;
      }
      case kPscluster: {
        if (absl::Status s = conn.ps_client->Push(shard.push_pull, &conn.pushed); !s.ok()) {
          return s;
        }
        if (absl::Status s = CheckPulled(conn.pushed.pulled(), shard.bytes, "push+pull"); !s.ok()) {
          return s;
        }
        break;
      }
      case kPsclusterTwoCalls:
      default: {
        if (absl::Status s = conn.ps_client->Push(shard.push, &conn.pushed); !s.ok()) return s;
        if (absl::Status s = conn.ps_client->Pull(shard.pull, &conn.pulled); !s.ok()) return s;
        if (absl::Status s = CheckPulled(conn.pulled, shard.bytes, "pull"); !s.ok()) return s;
        break;
      }
    }
  }
  return absl::OkStatus();
}

struct Limits {
  double seconds = 1.0;
  int64_t min_iterations = 1;
  int64_t max_iterations = 100000;
};

struct Measurement {
  double gbps = 0;
  int64_t fewest_round_trips = 0;  // Of any worker.
};

// Runs the shape's W workers at once, each doing round trips on `path` until
// `limits.seconds` have passed since their common start (at least
// min_iterations, at most max_iterations each); returns their total
// push+pull throughput over the time until the last one finished.
absl::StatusOr<Measurement> MeasureGBps(Cluster& c, Path path, size_t size_index,
                                        const Limits& limits) {
  using Clock = std::chrono::steady_clock;
  const int num_workers = c.shape.workers;
  std::vector<int64_t> iterations(static_cast<size_t>(num_workers), 0);
  std::vector<Clock::time_point> ends(static_cast<size_t>(num_workers));
  std::vector<absl::Status> statuses(static_cast<size_t>(num_workers));
  std::atomic<bool> failed{false};
  absl::Mutex mu;
  int ready = 0;
  absl::Notification go;
  // Written before go.Notify(), read after it.
  Clock::time_point start;
  Clock::time_point deadline;

  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_workers));
  for (int w = 0; w < num_workers; ++w) {
    threads.emplace_back([&, w] {
      {
        absl::MutexLock lock(&mu);
        ++ready;
      }
      go.WaitForNotification();
      int64_t n = 0;
      Clock::time_point now = start;
      // Bounded: each round trip by kCallTimeout, their number by the
      // deadline (or min_iterations) and max_iterations.
      do {
        absl::Status s = RoundTrip(c, path, size_index, w);
        if (!s.ok()) {
          statuses[w] = std::move(s);
          failed.store(true);
          break;
        }
        ++n;
        now = Clock::now();
      } while (!failed.load(std::memory_order_relaxed) && n < limits.max_iterations &&
               (now < deadline || n < limits.min_iterations));
      iterations[w] = n;
      ends[w] = now;
    });
  }
  // The clock starts once every thread is up and waiting, so thread start-up
  // is not timed and the workers overlap from their first round trip.
  bool all_ready = false;
  {
    const auto all_up = [&] { return ready >= num_workers; };
    absl::MutexLock lock(&mu);
    all_ready = mu.AwaitWithTimeout(absl::Condition(&all_up), absl::Seconds(60));
  }
  start = Clock::now();
  deadline = start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(limits.seconds));
  go.Notify();
  for (std::thread& t : threads) t.join();
  if (!all_ready) return absl::DeadlineExceededError("worker threads did not start in 60 s");
  for (absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }

  int64_t round_trips = 0;
  Measurement m;
  m.fewest_round_trips = iterations[0];
  Clock::time_point last_end = start;
  for (int w = 0; w < num_workers; ++w) {
    round_trips += iterations[w];
    m.fewest_round_trips = std::min(m.fewest_round_trips, iterations[w]);
    last_end = std::max(last_end, ends[w]);
  }
  int64_t bytes_per_round_trip = 0;  // N, less any rounding of the shards.
  for (const Shard& shard : c.shards[size_index]) bytes_per_round_trip += shard.bytes;
  const double elapsed = std::chrono::duration<double>(last_end - start).count();
  m.gbps = 2.0 * static_cast<double>(bytes_per_round_trip) * static_cast<double>(round_trips) /
           elapsed / 1e9;
  return m;
}

using bench::CpuModel;
using bench::JsonNumbers;
using bench::JsonString;
using bench::Median;
using bench::SizeLabel;

struct Point {
  int64_t bytes = 0;
  std::vector<double> gbps[kNumPaths];  // One per repeat.
  int64_t fewest_round_trips = -1;      // Of any worker, repeat and path.
};

std::string ShapeTitle(const ClusterShape& shape) {
  return absl::StrCat(shape.ps, " PS x ", shape.workers,
                      shape.workers == 1 ? " worker" : " workers");
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Push+pull throughput of pscluster's dense data plane against raw TCP and naive gRPC,\n"
      "for cluster shapes of P servers x W workers.\n"
      "  data_plane_bench [--sizes=4096,...] [--clusters=1x1,2x2] [--repeats=5] "
      "[--seconds_per_point=1.0] [--min_iterations=1] [--output_json=PATH]");
  absl::ParseCommandLine(argc, argv);

  std::vector<int64_t> sizes;
  for (const std::string& s : absl::GetFlag(FLAGS_sizes)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n <= 0 || n % 4 != 0 || n > (int64_t{1} << 29)) {
      std::cerr << "data_plane_bench: --sizes: \"" << s
                << "\" is not a positive multiple of 4 bytes up to 512 MiB\n";
      return kExitBadFlags;
    }
    sizes.push_back(n);
  }
  std::vector<ClusterShape> shapes;
  for (const std::string& s : absl::GetFlag(FLAGS_clusters)) {
    ClusterShape shape;
    if (!ParseShape(s, &shape)) {
      std::cerr << "data_plane_bench: --clusters: \"" << s
                << "\" is not PxW with 1 <= P <= " << kMaxPs << " and 1 <= W <= " << kMaxWorkers
                << " (e.g. 2x2)\n";
      return kExitBadFlags;
    }
    for (int64_t n : sizes) {
      if (n / shape.ps < 4) {
        std::cerr << "data_plane_bench: --sizes: " << n << " B cannot be split into " << shape.ps
                  << " shards of at least 4 bytes (--clusters=" << s << ")\n";
        return kExitBadFlags;
      }
    }
    shapes.push_back(shape);
  }
  Limits limits;
  const int repeats = absl::GetFlag(FLAGS_repeats);
  limits.seconds = absl::GetFlag(FLAGS_seconds_per_point);
  limits.min_iterations = absl::GetFlag(FLAGS_min_iterations);
  limits.max_iterations = absl::GetFlag(FLAGS_max_iterations);
  const auto bad_flag = [](const char* message) {
    std::cerr << "data_plane_bench: " << message << "\n";
    return kExitBadFlags;
  };
  if (sizes.empty()) return bad_flag("--sizes: need at least one size");
  if (shapes.empty()) return bad_flag("--clusters: need at least one shape");
  if (repeats < 1) return bad_flag("--repeats: need >= 1");
  // Also bounds each point: at most this long plus one round trip per worker.
  if (!(limits.seconds >= 0 && limits.seconds <= 3600)) {
    return bad_flag("--seconds_per_point: need 0 to 3600");
  }
  if (limits.max_iterations < 1) return bad_flag("--max_iterations: need >= 1");
  if (limits.min_iterations < 1 || limits.min_iterations > limits.max_iterations) {
    return bad_flag("--min_iterations: need 1 to --max_iterations");
  }

  std::vector<std::unique_ptr<Cluster>> clusters;
  for (const ClusterShape& shape : shapes) {
    auto cluster = StartCluster(shape, sizes, absl::GetFlag(FLAGS_tcp_buffer_bytes));
    if (!cluster.ok()) {
      std::cerr << "data_plane_bench: " << shape.label << ": " << cluster.status() << "\n";
      return 1;
    }
    clusters.push_back(*std::move(cluster));
  }

  // One untimed round trip per (shape, size, path, worker): connections up,
  // buffers grown, variables faulted in.
  for (auto& cluster : clusters) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (int p = 0; p < kNumPaths; ++p) {
        for (int w = 0; w < cluster->shape.workers; ++w) {
          if (absl::Status s = RoundTrip(*cluster, static_cast<Path>(p), i, w); !s.ok()) {
            std::cerr << "data_plane_bench: warm-up " << cluster->shape.label << " "
                      << kPathNames[p] << ": " << s << "\n";
            return 1;
          }
        }
      }
    }
  }

  const std::string only_path = absl::GetFlag(FLAGS_only_path);
  if (!only_path.empty() &&
      std::find(std::begin(kPathNames), std::end(kPathNames), only_path) == std::end(kPathNames)) {
    std::cerr << "data_plane_bench: --only_path: unknown path \"" << only_path << "\"\n";
    return kExitBadFlags;
  }
  // points[shape][size].
  std::vector<std::vector<Point>> points(shapes.size(), std::vector<Point>(sizes.size()));
  for (auto& row : points) {
    for (size_t i = 0; i < sizes.size(); ++i) row[i].bytes = sizes[i];
  }
  for (int r = 0; r < repeats; ++r) {
    std::cerr << "repeat " << (r + 1) << "/" << repeats << "\n";
    for (size_t k = 0; k < clusters.size(); ++k) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        Point& point = points[k][i];
        for (int p = 0; p < kNumPaths; ++p) {
          if (!only_path.empty() && only_path != kPathNames[p]) {
            point.gbps[p].push_back(std::numeric_limits<double>::quiet_NaN());
            continue;
          }
          absl::StatusOr<Measurement> m =
              MeasureGBps(*clusters[k], static_cast<Path>(p), i, limits);
          if (!m.ok()) {
            std::cerr << "data_plane_bench: " << shapes[k].label << " " << kPathNames[p] << " "
                      << SizeLabel(sizes[i]) << ": " << m.status() << "\n";
            return 1;
          }
          point.gbps[p].push_back(m->gbps);
          point.fewest_round_trips =
              point.fewest_round_trips < 0
                  ? m->fewest_round_trips
                  : std::min(point.fewest_round_trips, m->fewest_round_trips);
        }
      }
    }
  }

  const std::string date = bench::UtcNow();
  const std::string cpu = CpuModel();
  const unsigned cores = std::thread::hardware_concurrency();

  std::cout << absl::StrFormat(
      "Machine: %u CPUs, %s. Date: %s. Median of %d interleaved repeats, %.2f s per point.\n"
      "Push+pull throughput, GB/s (2N bytes per round trip, 1 GB = 1e9 B), summed over the "
      "workers. pscluster = one Push carrying the Pull (fused); two calls = Push, then Pull. "
      "A variable of N bytes is split evenly over the PS; every worker has its own connection "
      "to every server on every path.\n",
      cores, cpu, date, repeats, limits.seconds);
  std::vector<std::string> json_points;
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::cout << "\n### " << ShapeTitle(shapes[k]) << "\n\n"
              << "| size | raw TCP GB/s | naive gRPC GB/s | pscluster GB/s | pscluster two calls "
                 "GB/s | pscluster/raw TCP | pscluster/naive gRPC |\n"
                 "|---|---|---|---|---|---|---|\n";
    for (const Point& point : points[k]) {
      double median[kNumPaths];
      for (int p = 0; p < kNumPaths; ++p) median[p] = Median(point.gbps[p]);
      const double vs_tcp = median[kPscluster] / median[kRawTcp];
      const double vs_grpc = median[kPscluster] / median[kNaiveGrpc];
      std::cout << absl::StrFormat("| %s | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f |\n",
                                   SizeLabel(point.bytes), median[kRawTcp], median[kNaiveGrpc],
                                   median[kPscluster], median[kPsclusterTwoCalls], vs_tcp, vs_grpc);
      std::vector<std::string> fields = {
          absl::StrCat("\"cluster\": ", JsonString(shapes[k].label)),
          absl::StrCat("\"ps\": ", shapes[k].ps), absl::StrCat("\"workers\": ", shapes[k].workers),
          absl::StrCat("\"bytes\": ", point.bytes),
          absl::StrCat("\"fewest_round_trips\": ", point.fewest_round_trips)};
      for (int p = 0; p < kNumPaths; ++p) {
        fields.push_back(absl::StrFormat("\"%s_gbps\": %.6g", kPathNames[p], median[p]));
        fields.push_back(
            absl::StrCat("\"", kPathNames[p], "_gbps_repeats\": ", JsonNumbers(point.gbps[p])));
      }
      fields.push_back(absl::StrFormat("\"pscluster_over_raw_tcp\": %.6g", vs_tcp));
      fields.push_back(absl::StrFormat("\"pscluster_over_naive_grpc\": %.6g", vs_grpc));
      json_points.push_back(absl::StrCat("    {", absl::StrJoin(fields, ", "), "}"));
    }
  }

  const std::string json_path = absl::GetFlag(FLAGS_output_json);
  if (!json_path.empty()) {
    std::vector<std::string> labels;
    for (const ClusterShape& shape : shapes) labels.push_back(JsonString(shape.label));
    const std::string json = absl::StrCat(
        "{\n  \"benchmark\": \"data_plane_bench\",\n  \"date\": ", JsonString(date),
        ",\n  \"nproc\": ", cores, ",\n  \"cpu_model\": ", JsonString(cpu),
        ",\n  \"repeats\": ", repeats, ",\n  \"seconds_per_point\": ", limits.seconds,
        ",\n  \"min_iterations\": ", limits.min_iterations, ",\n  \"clusters\": [",
        absl::StrJoin(labels, ", "), "]",
        ",\n  \"unit\": \"GB/s push+pull summed over workers, 2N bytes per round trip, "
        "1 GB = 1e9 B, median\",",
        "\n  \"points\": [\n", absl::StrJoin(json_points, ",\n"), "\n  ]\n}\n");
    if (absl::Status s = WriteFileAtomically(json_path, json); !s.ok()) {
      std::cerr << "data_plane_bench: --output_json: " << s << "\n";
      return 1;
    }
  }

  for (auto& cluster : clusters) {
    for (auto& server : cluster->echo_servers) server->Shutdown();
    for (auto& server : cluster->ps_servers) server->Shutdown();
  }
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
