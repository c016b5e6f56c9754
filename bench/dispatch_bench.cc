// dispatch_bench: how fast the coordinator schedules closures. NOOP closures
// (the worker checks the job and answers; no data, no PS) go through the
// coordinator's real dispatch machinery — ClosureQueue and the Dispatcher a
// phase runs (its takers driven from a DispatchExecutor's few threads;
// --dispatch=threads: a RunDispatchLoop thread per taker, as the Python
// API's ClusterCoordinator runs it) — over GrpcWorkerClient to N
// real worker cores (WorkerState + WorkerService behind StartServer on
// 127.0.0.1:0, as worker/main.cc wires them), all in this process.
//
// Per worker count it measures, interleaved and repeated (median of repeats):
//   ping        - raw unary Ping round trips to the same workers with the same
//                 threads: the ceiling of one closure per RPC;
//   dispatch/k  - closures through the dispatch loop, k closures per RPC
//                 (k = 1: RunClosure; k > 1: RunClosures batches).
// Latency is per closure, from the dispatch thread sending it to its result
// being recorded (the loop's on_success); for ping, the round trip.
// Exit codes: 0 on success, 1 if a server cannot start or a closure fails,
// 2 for invalid flags.
#include <prometheus/registry.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/noop_job.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/dispatch_executor.h"
#include "coordinator/core/dispatcher.h"
#include "coordinator/service/grpc_worker_client.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "rpc/rpc_util.h"
#include "worker/core/worker_state.h"
#include "worker/service/worker_service.h"

ABSL_FLAG(std::vector<std::string>, workers, std::vector<std::string>({"1", "2", "4"}),
          "Worker counts to measure, comma-separated.");
ABSL_FLAG(int, in_flight, 4,
          "Takers per worker (train.closures_per_worker): RPCs in flight per worker.");
ABSL_FLAG(std::string, dispatch, "async",
          "async (the phases' Dispatcher over a DispatchExecutor) or threads (a blocking "
          "RunDispatchLoop thread per taker).");
ABSL_FLAG(std::vector<std::string>, closures_per_rpc, std::vector<std::string>({"1", "8", "32"}),
          "Batch sizes (train.closures_per_rpc) to measure, comma-separated.");
ABSL_FLAG(int64_t, closures, 20000,
          "Closures (or pings) per point at one closure per RPC; a point with k closures per "
          "RPC runs k times as many, so every point makes about as many RPCs.");
ABSL_FLAG(int, repeats, 3, "Interleaved repeats per point; each cell is their median.");
ABSL_FLAG(std::vector<std::string>, tf_closures_per_sec, {},
          "Optional: TF's measured dispatch rate per worker count (bench/compare_tf "
          "`dispatch`), in --workers order; adds a 'x TF' column.");
ABSL_FLAG(std::string, output_json, "", "If set, the results are also written here as JSON.");

namespace pscluster {
namespace {

constexpr int kExitBadFlags = 2;
constexpr char kJobId[] = "dispatch-bench";

// One worker task (noop_job.h) and the coordinator's client of it.
struct Worker : bench::InProcessWorker {
  std::unique_ptr<GrpcWorkerClient> client;
};

struct Point {
  double rate = 0;  // closures (or pings) per second
  double p50_ms = 0, p99_ms = 0;
};

Point Summarise(int64_t n, absl::Duration elapsed, std::vector<double> latency_ms) {
  Point p;
  p.rate = n / absl::ToDoubleSeconds(elapsed);
  p.p50_ms = bench::Percentile(&latency_ms, 0.50);
  p.p99_ms = bench::Percentile(&latency_ms, 0.99);
  return p;
}

// `n` Ping round trips from workers.size() * in_flight threads.
absl::StatusOr<Point> RunPing(const std::vector<Worker*>& workers, int in_flight, int64_t n) {
  const int threads = static_cast<int>(workers.size()) * in_flight;
  std::vector<double> latency(n);
  std::vector<absl::Status> status(threads);
  std::vector<std::thread> pool;
  const absl::Time start = absl::Now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      WorkerClient* client = workers[t % workers.size()]->client.get();
      for (int64_t i = t; i < n; i += threads) {
        PingResponse response;
        const int64_t t0 = absl::GetCurrentTimeNanos();
        absl::Status s = client->Ping(PingRequest(), &response);
        latency[i] = (absl::GetCurrentTimeNanos() - t0) / 1e6;
        if (!s.ok()) status[t] = s;
      }
    });
  }
  for (auto& t : pool) t.join();
  const absl::Duration elapsed = absl::Now() - start;
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return Summarise(n, elapsed, std::move(latency));
}

// `n` NOOP closures through the dispatch loop, `in_flight` loops per worker.
absl::StatusOr<Point> RunDispatch(const std::vector<Worker*>& workers, int in_flight, int per_rpc,
                                  int64_t n) {
  std::vector<int64_t> sent_ns(n, 0);
  std::vector<double> latency(n, 0);
  std::vector<std::unique_ptr<bench::StampingClient>> clients;
  for (Worker* w : workers)
    clients.push_back(std::make_unique<bench::StampingClient>(w->client.get(), &sent_ns));
  ClosureQueue queue;
  for (int64_t id = 0; id < n; ++id) {
    Closure c;
    c.id = id;
    c.split_index = id;
    c.mode = NOOP;
    queue.Put(std::move(c));
  }
  DispatchOptions d;
  d.job_id = kJobId;
  d.mode = NOOP;
  d.closures_per_rpc = per_rpc;
  d.max_attempts = 1;  // a failed no-op is a bench failure, not something to hide by retrying
  d.on_success = [&](const Closure& c, const RunClosureResponse&) {
    latency[c.id] = (absl::GetCurrentTimeNanos() - sent_ns[c.id]) / 1e6;
  };
  std::vector<std::thread> pool;
  const bool async = absl::GetFlag(FLAGS_dispatch) != "threads";
  DispatchExecutor executor(DispatchExecutor::Options{async ? 0 : 1});
  Dispatcher dispatcher(&queue, &executor);
  const absl::Time start = absl::Now();
  for (auto& client : clients) {
    if (async) {
      dispatcher.Start(client.get(), d, in_flight);
      continue;
    }
    for (int k = 0; k < in_flight; ++k) {
      pool.emplace_back([&queue, &d, c = client.get()] { RunDispatchLoop(c, &queue, d); });
    }
  }
  const absl::Status s = queue.Wait();
  const absl::Duration elapsed = absl::Now() - start;
  for (auto& t : pool) t.join();
  dispatcher.Join();
  if (!s.ok()) return s;
  return Summarise(n, elapsed, std::move(latency));
}

absl::StatusOr<std::vector<int>> Ints(const std::vector<std::string>& v, const char* flag) {
  std::vector<int> out;
  for (const std::string& s : v) {
    int x;
    if (!absl::SimpleAtoi(s, &x) || x < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", s, "' is not an integer >= 1"));
    }
    out.push_back(x);
  }
  return out;
}

struct Row {
  int workers;
  std::string path;  // "ping" or "dispatch"
  int per_rpc;
  std::vector<Point> repeats;
  double Median(double Point::*field) const {
    std::vector<double> v;
    for (const Point& p : repeats) v.push_back(p.*field);
    return bench::Median(v);
  }
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Closures/s and scheduling latency of the coordinator's dispatch.");
  absl::ParseCommandLine(argc, argv);
  auto worker_counts = Ints(absl::GetFlag(FLAGS_workers), "workers");
  auto batch_sizes = Ints(absl::GetFlag(FLAGS_closures_per_rpc), "closures_per_rpc");
  const int in_flight = absl::GetFlag(FLAGS_in_flight);
  const int64_t n = absl::GetFlag(FLAGS_closures);
  if (absl::GetFlag(FLAGS_dispatch) != "async" && absl::GetFlag(FLAGS_dispatch) != "threads") {
    std::cerr << "--dispatch must be async or threads, got '" << absl::GetFlag(FLAGS_dispatch)
              << "'\n";
    return kExitBadFlags;
  }
  const int repeats = absl::GetFlag(FLAGS_repeats);
  std::vector<double> tf_rates;
  for (const std::string& s : absl::GetFlag(FLAGS_tf_closures_per_sec)) {
    double x;
    if (!absl::SimpleAtod(s, &x) || !(x > 0)) {
      std::cerr << "--tf_closures_per_sec: '" << s << "' is not a positive number\n";
      return kExitBadFlags;
    }
    tf_rates.push_back(x);
  }
  for (const auto* e : {&worker_counts, &batch_sizes}) {
    if (!e->ok()) {
      std::cerr << e->status().message() << "\n";
      return kExitBadFlags;
    }
  }
  if (in_flight < 1 || n < 1 || repeats < 1 ||
      (!tf_rates.empty() && tf_rates.size() != worker_counts->size())) {
    std::cerr << "--in_flight, --closures and --repeats must be >= 1; --tf_closures_per_sec "
                 "needs one rate per --workers entry\n";
    return kExitBadFlags;
  }

  // Start the most workers any point needs; a point with N uses the first N.
  const int max_workers = *std::max_element(worker_counts->begin(), worker_counts->end());
  absl::StatusOr<SetupJobRequest> setup = bench::NoopSetupJob(kJobId);
  if (!setup.ok()) {
    std::cerr << "job spec: " << setup.status() << "\n";
    return 1;
  }
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < max_workers; ++w) {
    auto worker = std::make_unique<Worker>();
    if (absl::Status s = worker->Start(); !s.ok()) {
      std::cerr << "worker " << w << ": " << s << "\n";
      return 1;
    }
    worker->client =
        std::make_unique<GrpcWorkerClient>(absl::StrCat("127.0.0.1:", worker->server->port()));
    SetupJobResponse response;
    if (absl::Status s = worker->client->SetupJob(*setup, &response); !s.ok()) {
      std::cerr << "SetupJob on worker " << w << ": " << s << "\n";
      return 1;
    }
    workers.push_back(std::move(worker));
  }

  std::vector<Row> rows;
  for (int w : *worker_counts) {
    rows.push_back({w, "ping", 1, {}});
    for (int k : *batch_sizes) rows.push_back({w, "dispatch", k, {}});
  }
  std::cerr << "dispatch_bench: " << rows.size() << " points x " << repeats << " repeats, " << n
            << " closures each, " << in_flight << " in flight per worker\n";
  for (int r = -1; r < repeats; ++r) {  // r = -1: untimed warm-up (channels, threads)
    for (Row& row : rows) {
      std::vector<Worker*> use;
      for (int w = 0; w < row.workers; ++w) use.push_back(workers[w].get());
      const int64_t count = r < 0 ? std::min<int64_t>(n, 2000) : n * row.per_rpc;
      absl::StatusOr<Point> p = row.path == "ping"
                                    ? RunPing(use, in_flight, count)
                                    : RunDispatch(use, in_flight, row.per_rpc, count);
      if (!p.ok()) {
        std::cerr << row.path << " with " << row.workers << " worker(s): " << p.status() << "\n";
        return 1;
      }
      if (r < 0) continue;
      row.repeats.push_back(*p);
      std::cerr << absl::StrFormat(
          "  repeat %d: %d worker(s) %s k=%d: %.0f/s p50 %.3f ms p99 %.3f ms\n", r + 1, row.workers,
          row.path, row.per_rpc, p->rate, p->p50_ms, p->p99_ms);
    }
  }

  std::cout << "\n"
            << bench::UtcNow() << ", " << std::thread::hardware_concurrency() << " CPUs ("
            << bench::CpuModel() << "), " << in_flight << " RPCs in flight per worker, " << n
            << " RPCs' worth of closures per point, median of " << repeats << "\n\n";
  std::cout << "| workers | path | closures/RPC | closures/s | p50 ms | p99 ms | vs ping |"
            << (tf_rates.empty() ? "" : " x TF |") << "\n";
  std::cout << "|---|---|---|---|---|---|---|" << (tf_rates.empty() ? "" : "---|") << "\n";
  double ping_rate = 0;
  std::string json = "{\"date\": " + bench::JsonString(bench::UtcNow()) + ", \"points\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const double rate = row.Median(&Point::rate);
    if (row.path == "ping") ping_rate = rate;
    const size_t wi = std::find(worker_counts->begin(), worker_counts->end(), row.workers) -
                      worker_counts->begin();
    std::cout << absl::StrFormat("| %d | %s | %s | %.0f | %.3f | %.3f | %.2f |", row.workers,
                                 row.path == "ping" ? "ping (ceiling)" : "dispatch",
                                 row.path == "ping" ? "-" : absl::StrCat(row.per_rpc), rate,
                                 row.Median(&Point::p50_ms), row.Median(&Point::p99_ms),
                                 rate / ping_rate);
    if (!tf_rates.empty()) std::cout << absl::StrFormat(" %.1f |", rate / tf_rates[wi]);
    std::cout << "\n";
    std::vector<double> rates;
    for (const Point& p : row.repeats) rates.push_back(p.rate);
    json += absl::StrFormat(
        "%s{\"workers\": %d, \"path\": \"%s\", \"closures_per_rpc\": %d, \"per_sec\": %.1f, "
        "\"p50_ms\": %.4f, \"p99_ms\": %.4f, \"per_sec_repeats\": %s}",
        i == 0 ? "" : ", ", row.workers, row.path, row.per_rpc, rate, row.Median(&Point::p50_ms),
        row.Median(&Point::p99_ms), bench::JsonNumbers(rates));
  }
  json += "]}\n";
  const std::string out = absl::GetFlag(FLAGS_output_json);
  if (!out.empty()) std::ofstream(out) << json;
  std::string met;
  for (const Row& row : rows) {
    if (row.path == "dispatch" && row.workers == 4 && row.Median(&Point::rate) >= 10000) {
      absl::StrAppend(&met, met.empty() ? "" : ", ", row.per_rpc);
    }
  }
  if (std::count(worker_counts->begin(), worker_counts->end(), 4) > 0) {
    std::cout << "\ntarget (>= 10000 closures/s with 4 workers): "
              << (met.empty() ? "not met" : "met with closures_per_rpc = " + met) << "\n";
  }
  for (auto& w : workers) w->server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
