// data_plane_bench: pscluster's dense data plane (a Push of one float32
// variable's gradient through RemotePsClient to a real ParameterServerService,
// carrying a Pull of the same variable answered in the same round trip) measured
// against its two ceilings in one process run:
//   raw TCP     - blocking-socket ping-pong over 127.0.0.1;
//   naive gRPC  - a bare unary Echo(bytes) service, nothing tuned;
//   pscluster   - VariableStore + ParameterServerService + RemotePsClient, the
//                 fused push+pull (PushRequest.pull) a worker sends each step;
//   pscluster two calls - the same with Push, then Pull: two RPCs;
//   pscluster TLS - the fused push+pull on a second data plane of the same
//                 PS speaking mutual TLS 1.3 (rpc/tls_stream.h; certificates
//                 made in memory), frames written and read as
//                 DataPlaneClient does; TLS/plaintext = it over pscluster;
//   pscluster striped - (with --stripes=K > 1) each PS's shard as K
//                 variables pushed+pulled at once over K connections: an
//                 upper bound for striping one tensor over K channels;
//   ps-lite     - (with --pslite_bench) ps-lite's ZPush+ZPull and ZPushPull
//                 with a dense SGD server, as child processes
//                 (bench/pslite/), measured between the other paths.
// Each path sends N bytes and gets N bytes back per round trip, so its
// throughput is 2N / round-trip time (1 GB = 1e9 B).
//
// Cluster shapes (--clusters=PxW): P servers of each path and W worker
// threads running at once, each with its own connections to all P servers.
// A variable of N bytes is split into P shards of N/P bytes, one per server;
// a worker's round trip sends each server its shard and gets it back. raw
// TCP, pscluster and ps-lite send to all servers at once before waiting for
// any (as a worker's step does: worker/core/trainer.cc); naive gRPC and
// pscluster two calls go server after server. All paths use the same
// bytes, so 1x1 is the single-connection comparison and PxW shows what the
// paths do under a cluster's concurrency.
//
// Points are interleaved (repeat -> shape -> size -> path) and each cell is
// the median over repeats, so slow drift of a noisy machine hits all paths
// alike.
//
// All servers but ps-lite's run in threads of this process on loopback; the
// servers, connections and round trips are in bench/data_plane_cluster.h;
// see README.md. Exit codes: 0 on success, 1 if a server cannot start or a call fails,
// 2 for invalid flags.
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
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/data_plane_cluster.h"
#include "bench/pslite_launcher.h"
#include "common/checkpoint_file.h"
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
ABSL_FLAG(int, tcp_buffer_bytes, 0,
          "SO_SNDBUF/SO_RCVBUF of the raw TCP sockets (the kernel doubles it); 0 (default) "
          "leaves the kernel's autotuning alone, as pscluster's data-plane sockets do (on "
          "2026-12-01 autotuning gave raw TCP 5.9/4.3/4.1/4.6 GB/s at 2x2 and 1-64 MiB "
          "against 5.5/3.7/3.3/3.6 with 4 MiB buffers).");
ABSL_FLAG(std::string, only_path, "",
          "If set (a path name: raw_tcp, naive_grpc, pscluster, pscluster_grpc, "
          "pscluster_two_calls, pslite_fused, ...), only this path is "
          "timed (the others report nan): for profiling one path with perf.");
ABSL_FLAG(std::string, output_json, "", "If set, the results are also written here as JSON.");
ABSL_FLAG(int, stripes, 1,
          "If > 1, adds the path pscluster_striped: each PS's shard is split into K variables "
          "of 1/K of it, and a round trip pushes all K (each carrying its pull) at once over K "
          "connections per worker and PS. An upper bound for striping one tensor over K "
          "channels: none of the bookkeeping (exactly-once keys per stripe, one optimizer step "
          "per whole tensor) that the real feature would need.");
ABSL_FLAG(std::string, pslite_bench, "",
          "Path of pslite_bench (built by bench/pslite/build_pslite.sh, e.g. "
          "bench/.pslite/pslite_bench). If set, ps-lite's ZPush+ZPull and ZPushPull are measured "
          "as two more paths, interleaved with the others in every repeat.");

namespace pscluster {
namespace {

using bench::Cluster;
using bench::ClusterShape;
using bench::IsPslite;
using bench::kMaxPs;
using bench::kMaxWorkers;
using bench::kNaiveGrpc;
using bench::kNumPaths;
using bench::kPathNames;
using bench::kPscluster;
using bench::kPsclusterGrpc;
using bench::kPsclusterStriped;
using bench::kPsclusterTls;
using bench::kPsclusterTwoCalls;
using bench::kPsliteFused;
using bench::kPslitePushPull;
using bench::kRawTcp;
using bench::ParseShape;
using bench::Path;
using bench::RoundTrip;
using bench::Shard;
using bench::StartCluster;

constexpr int kExitBadFlags = 2;

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
  if (IsPslite(path)) {
    // ps-lite's workers are processes of their own; the launcher starts them
    // together and counts the same way (bytes sent by all workers over the
    // time until the last one finished).
    int64_t bytes = 0;
    for (const Shard& shard : c.shards[size_index]) bytes += shard.bytes;
    absl::StatusOr<bench::PsliteLauncher::Result> r =
        c.pslite->Run(path == kPsliteFused ? "fused" : "push_pull", bytes, limits.seconds,
                      limits.min_iterations, limits.max_iterations);
    if (!r.ok()) return r.status();
    return Measurement{r->gbps, r->fewest_round_trips};
  }
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
  for (const Shard& shard : c.shards[size_index]) {
    bytes_per_round_trip += path == kPsclusterStriped ? shard.stripe_bytes : shard.bytes;
  }
  const double elapsed = std::chrono::duration<double>(last_end - start).count();
  m.gbps = 2.0 * static_cast<double>(bytes_per_round_trip) * static_cast<double>(round_trips) /
           elapsed / 1e9;
  return m;
}

using bench::CpuModel;
using bench::JsonNumber;
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

  const std::string pslite_bench = absl::GetFlag(FLAGS_pslite_bench);
  const bool with_pslite = !pslite_bench.empty();
  const int stripes = absl::GetFlag(FLAGS_stripes);
  if (stripes < 1 || stripes > 64) return bad_flag("--stripes: need 1 to 64");
  // Paths measured in this run.
  const auto enabled = [&](int p) {
    if (IsPslite(p)) return with_pslite;
    if (p == kPsclusterStriped) return stripes > 1;
    return true;
  };
  std::vector<std::unique_ptr<Cluster>> clusters;
  for (const ClusterShape& shape : shapes) {
    auto cluster =
        StartCluster(shape, sizes, absl::GetFlag(FLAGS_tcp_buffer_bytes), stripes, pslite_bench);
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
        if (!enabled(p)) continue;
        if (IsPslite(p)) {
          Limits once;
          once.seconds = 0;
          if (absl::Status s = MeasureGBps(*cluster, static_cast<Path>(p), i, once).status();
              !s.ok()) {
            std::cerr << "data_plane_bench: warm-up " << cluster->shape.label << " "
                      << kPathNames[p] << ": " << s << "\n";
            return 1;
          }
          continue;
        }
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
          if ((!only_path.empty() && only_path != kPathNames[p]) || !enabled(p)) {
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
      "to every server on every path.%s\n",
      cores, cpu, date, repeats, limits.seconds,
      with_pslite ? " ps-lite: ZPush+ZPull (two round trips) and ZPushPull (fused), dense SGD "
                    "server, one process per node."
                  : "");
  std::vector<std::string> json_points;
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::cout << "\n### " << ShapeTitle(shapes[k]) << "\n\n";
    // Columns: GB/s of each path measured, then the ratios.
    std::vector<std::pair<std::string, int>> columns = {{"raw TCP", kRawTcp},
                                                        {"naive gRPC", kNaiveGrpc}};
    if (with_pslite) {
      columns.push_back({"ps-lite push+pull", kPslitePushPull});
      columns.push_back({"ps-lite fused", kPsliteFused});
    }
    columns.push_back({"pscluster", kPscluster});
    columns.push_back({"pscluster on gRPC", kPsclusterGrpc});
    columns.push_back({"pscluster two calls", kPsclusterTwoCalls});
    columns.push_back({"pscluster TLS", kPsclusterTls});
    if (stripes > 1) {
      columns.push_back({absl::StrCat("pscluster striped x", stripes), kPsclusterStriped});
    }
    std::cout << "| size |";
    for (const auto& [name, path] : columns) std::cout << " " << name << " GB/s |";
    std::cout << " pscluster/raw TCP |" << (with_pslite ? " pscluster/ps-lite fused |" : "")
              << " pscluster/naive gRPC | TLS/plaintext |\n|---|";
    for (size_t i = 0; i < columns.size() + (with_pslite ? 4 : 3); ++i) std::cout << "---|";
    std::cout << "\n";
    for (const Point& point : points[k]) {
      double median[kNumPaths];
      for (int p = 0; p < kNumPaths; ++p) median[p] = Median(point.gbps[p]);
      const double vs_tcp = median[kPscluster] / median[kRawTcp];
      const double vs_grpc = median[kPscluster] / median[kNaiveGrpc];
      const double vs_pslite = median[kPscluster] / median[kPsliteFused];
      const double tls_ratio = median[kPsclusterTls] / median[kPscluster];
      std::cout << "| " << SizeLabel(point.bytes) << " |";
      for (const auto& [name, path] : columns) {
        std::cout << absl::StrFormat(" %.3f |", median[path]);
      }
      std::cout << absl::StrFormat(" %.2f |", vs_tcp);
      if (with_pslite) std::cout << absl::StrFormat(" %.2f |", vs_pslite);
      std::cout << absl::StrFormat(" %.2f | %.2f |\n", vs_grpc, tls_ratio);
      std::vector<std::string> fields = {
          absl::StrCat("\"cluster\": ", JsonString(shapes[k].label)),
          absl::StrCat("\"ps\": ", shapes[k].ps), absl::StrCat("\"workers\": ", shapes[k].workers),
          absl::StrCat("\"bytes\": ", point.bytes),
          absl::StrCat("\"fewest_round_trips\": ", point.fewest_round_trips)};
      for (int p = 0; p < kNumPaths; ++p) {
        fields.push_back(absl::StrCat("\"", kPathNames[p], "_gbps\": ", JsonNumber(median[p])));
        fields.push_back(
            absl::StrCat("\"", kPathNames[p], "_gbps_repeats\": ", JsonNumbers(point.gbps[p])));
      }
      fields.push_back(absl::StrCat("\"pscluster_over_raw_tcp\": ", JsonNumber(vs_tcp)));
      fields.push_back(absl::StrCat("\"pscluster_over_naive_grpc\": ", JsonNumber(vs_grpc)));
      fields.push_back(absl::StrCat("\"pscluster_tls_over_pscluster\": ", JsonNumber(tls_ratio)));
      if (with_pslite) {
        fields.push_back(absl::StrCat("\"pscluster_over_pslite_fused\": ", JsonNumber(vs_pslite)));
      }
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
        ",\n  \"min_iterations\": ", limits.min_iterations, ",\n  \"stripes\": ", stripes,
        ",\n  \"pslite\": ", with_pslite ? "true" : "false", ",\n  \"clusters\": [",
        absl::StrJoin(labels, ", "), "]",
        ",\n  \"unit\": \"GB/s push+pull summed over workers, 2N bytes per round trip, "
        "1 GB = 1e9 B, median\",",
        "\n  \"points\": [\n", absl::StrJoin(json_points, ",\n"), "\n  ]\n}\n");
    if (absl::Status s = WriteFileAtomically(json_path, json).status(); !s.ok()) {
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
