// scale_bench: how pscluster's costs grow with the number of workers and PS
// tasks (issue 25; bench/README.md "Scale"). Modes (--mode):
//   dispatch        the coordinator side in this process — ClosureQueue and
//                   the Dispatcher over real GrpcWorkerClients (NOOP
//                   closures, train.closures_per_worker takers per worker,
//                   driven from one DispatchExecutor; --dispatch=threads: a
//                   RunDispatchLoop thread per taker instead), the
//                   job's HealthWatch and the readiness ClusterProbe over
//                   one ClusterLiveness (as coordinator/main.cc wires them)
//                   over a real GrpcHealthChecker (its RPCs counted) at
//                   their default intervals — against N real WorkerService servers in a
//                   CHILD process (this binary with --mode=workers), so that
//                   getrusage of this process is the coordinator's CPU alone.
//                   Per worker count: closures/s, coordinator and worker CPU
//                   per closure, p50/p99 closure latency, health-check RPCs/s
//                   and checks answered without one, the pollers' CPU,
//                   coordinator threads; then, for --idle_s with no
//                   closures, the pollers' RPC/s and CPU.
//   ps_connections  a real ps_server child and N idle clients from this
//                   process (scale_ps.h); RSS and threads per connection.
//   push_pull       push+pull round-trip latency with P PS and W concurrent
//                   clients (scale_ps.h).
//   workers         (internal) the child of `dispatch`.
// Each mode prints a markdown table and writes --output_json; bench/scale.sh
// runs them all and bench/scale_plots.py draws the curves.
//
// The soft RLIMIT_NOFILE is raised to the hard limit at start (children
// inherit it): 1,024 workers need ~3 descriptors each on each side.
// Exit codes: 0 success, 1 a server, child or call failed, 2 bad flags.
#include <prometheus/registry.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
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
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/noop_job.h"
#include "bench/scale_ps.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "coordinator/core/closure_dispatch.h"
#include "coordinator/core/closure_queue.h"
#include "coordinator/core/cluster_liveness.h"
#include "coordinator/core/cluster_probe.h"
#include "coordinator/core/dispatch_executor.h"
#include "coordinator/core/dispatcher.h"
#include "coordinator/core/health_watch.h"
#include "coordinator/service/grpc_health_checker.h"
#include "coordinator/service/grpc_worker_client.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "rpc/rpc_util.h"
#include "worker/core/worker_state.h"
#include "worker/service/worker_service.h"

ABSL_FLAG(std::string, mode, "dispatch", "dispatch, ps_connections, push_pull (or workers).");
ABSL_FLAG(bool, quick, false,
          "Smallest configuration of the mode (a smoke test of seconds), overriding the lists.");
ABSL_FLAG(std::vector<std::string>, workers,
          std::vector<std::string>({"2", "8", "32", "64", "128", "256", "512", "1024"}),
          "dispatch: worker counts; workers: how many servers to start.");
ABSL_FLAG(int, in_flight, 2, "dispatch: loops per worker (train.closures_per_worker, default 2).");
ABSL_FLAG(int64_t, closures, 20000, "dispatch: NOOP closures per point (at least 8 per worker).");
ABSL_FLAG(std::string, dispatch, "async",
          "dispatch: async (the phases' Dispatcher: takers driven from a few executor threads) or "
          "threads (a blocking RunDispatchLoop thread per taker, as the Python API's).");
ABSL_FLAG(int, repeats, 1, "dispatch: interleaved repeats per point; cells are medians.");
ABSL_FLAG(double, health_interval_s, 0.5,
          "dispatch: HealthWatch interval (fault_tolerance.health_check_interval_s default).");
ABSL_FLAG(double, probe_interval_s, 2.0,
          "dispatch: ClusterProbe interval (coordinator/main.cc's default).");
ABSL_FLAG(double, idle_s, 3.0,
          "dispatch: after the closures, seconds the health pollers run alone (their "
          "steady traffic and CPU).");
ABSL_FLAG(bool, health, true,
          "dispatch: run the health pollers (false: neither runs, for the CPU they cost).");
ABSL_FLAG(bool, mutex_deadlock_detection, true,
          "false: turn absl's Mutex deadlock detection off (it is on in a libabsl built without "
          "NDEBUG, as Debian's, and so in the coordinator), to measure what it costs.");
ABSL_FLAG(std::string, port_file, "", "workers: where the child writes its ports.");
ABSL_FLAG(std::string, output_json, "", "If set, the results are also written here as JSON.");

extern char** environ;

namespace pscluster {
namespace {

constexpr int kExitBadFlags = 2;
constexpr char kJobId[] = "scale-bench";

// ---------------------------------------------------------------------------
// The child: N worker servers (noop_job.h's InProcessWorker).

int RunWorkersChild(int n, const std::string& port_file) {
  std::vector<std::unique_ptr<bench::InProcessWorker>> workers;
  std::vector<std::string> ports;
  for (int w = 0; w < n; ++w) {
    auto worker = std::make_unique<bench::InProcessWorker>();
    if (absl::Status s = worker->Start(); !s.ok()) {
      std::cerr << "scale_bench workers: worker " << w << ": " << s << "\n";
      return 1;
    }
    ports.push_back(absl::StrCat(worker->server->port()));
    workers.push_back(std::move(worker));
  }
  // Written whole, then renamed: the parent never reads half a list.
  const std::string tmp = port_file + ".tmp";
  std::ofstream(tmp) << absl::StrJoin(ports, " ") << "\n";
  if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
    std::cerr << "scale_bench workers: cannot write " << port_file << "\n";
    return 1;
  }
  for (;;) pause();  // until the parent's SIGTERM
}

// The parent's handle on that child; stops it by pid.
class WorkersChild {
 public:
  static absl::StatusOr<std::unique_ptr<WorkersChild>> Start(int n) {
    auto c = std::unique_ptr<WorkersChild>(new WorkersChild());
    c->port_file_ = absl::StrCat("/tmp/scale_bench_workers.", getpid());
    std::remove(c->port_file_.c_str());
    std::vector<std::string> args = {"/proc/self/exe", "--mode=workers",
                                     absl::StrCat("--workers=", n),
                                     absl::StrCat("--port_file=", c->port_file_)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (int rc = posix_spawn(&c->pid_, "/proc/self/exe", nullptr, nullptr, argv.data(), environ);
        rc != 0) {
      return absl::InternalError(absl::StrCat("cannot spawn the workers child: ", strerror(rc)));
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(120) + absl::Milliseconds(200) * n;
    while (absl::Now() < deadline) {
      std::ifstream in(c->port_file_);
      std::string line;
      if (std::getline(in, line) && !line.empty()) {
        for (absl::string_view p : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
          c->addresses_.push_back(absl::StrCat("127.0.0.1:", p));
        }
        if (static_cast<int>(c->addresses_.size()) == n) return c;
        return absl::InternalError(
            absl::StrCat("the workers child wrote ", c->addresses_.size(), " ports, not ", n));
      }
      if (waitpid(c->pid_, nullptr, WNOHANG) == c->pid_) {
        c->pid_ = -1;
        return absl::InternalError("the workers child exited before writing its ports");
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("the workers child started no ", n, " servers in time"));
  }
  ~WorkersChild() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      for (int i = 0; i < 50 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) {
        absl::SleepFor(absl::Milliseconds(100));
      }
      if (kill(pid_, 0) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
    std::remove(port_file_.c_str());
  }
  const std::vector<std::string>& addresses() const { return addresses_; }
  // The child's user + system CPU so far, seconds.
  double CpuSeconds() const { return bench::ProcessCpuSeconds(pid_); }

 private:
  WorkersChild() = default;
  pid_t pid_ = -1;
  std::string port_file_;
  std::vector<std::string> addresses_;
};

// ---------------------------------------------------------------------------
// The coordinator side.

// A checker, counted: checks and the CPU the calling thread spent in them
// (around the real checker: the RPCs; around the shared liveness: one
// poller's checks, answered from the record or by an RPC).
class CountingHealthChecker final : public HealthChecker {
 public:
  explicit CountingHealthChecker(HealthChecker* inner) : inner_(inner) {}
  absl::StatusOr<uint64_t> CheckPs(int index) override {
    const double t0 = bench::ThreadCpuSeconds();
    auto r = inner_->CheckPs(index);
    Count(t0);
    return r;
  }
  absl::Status CheckWorker(int index) override {
    const double t0 = bench::ThreadCpuSeconds();
    absl::Status s = inner_->CheckWorker(index);
    Count(t0);
    if (!s.ok()) failed_.fetch_add(1);
    return s;
  }
  absl::Status CheckWorkerWithin(int index, absl::Duration max_age) override {
    const double t0 = bench::ThreadCpuSeconds();
    absl::Status s = inner_->CheckWorkerWithin(index, max_age);
    Count(t0);
    if (!s.ok()) failed_.fetch_add(1);
    return s;
  }
  void WorkerAnswered(int index) override {
    const double t0 = bench::ThreadCpuSeconds();
    inner_->WorkerAnswered(index);
    cpu_ns_.fetch_add(static_cast<int64_t>((bench::ThreadCpuSeconds() - t0) * 1e9));
  }
  int64_t calls() const { return calls_.load(); }
  int64_t failed() const { return failed_.load(); }
  double cpu_seconds() const { return cpu_ns_.load() / 1e9; }

 private:
  void Count(double t0) {
    calls_.fetch_add(1);
    cpu_ns_.fetch_add(static_cast<int64_t>((bench::ThreadCpuSeconds() - t0) * 1e9));
  }
  HealthChecker* const inner_;
  std::atomic<int64_t> calls_{0}, failed_{0}, cpu_ns_{0};
};

struct DispatchPoint {
  int workers = 0;
  double rate = 0, p50_ms = 0, p99_ms = 0;
  double coord_cpu_us = 0, worker_cpu_us = 0;  // per closure
  double health_rps = 0;                       // health-check RPCs/s (both pollers)
  double saved_rps = 0;                        // checks/s answered without an RPC
  double health_cpu_share = 0;                 // of the coordinator's CPU
  int64_t health_failed = 0;
  // With no closures, for --idle_s: health-check RPCs/s of both pollers and
  // the coordinator's CPU (cores busy).
  double idle_rps = 0, idle_cores = 0;
  int threads = 0;  // the coordinator's, at most, during the point
  double seconds = 0;
};

// `executor`: the asynchronous Dispatcher's threads; null: a thread per
// taker running RunDispatchLoop (--dispatch=threads).
absl::StatusOr<DispatchPoint> RunDispatchPoint(const std::vector<std::string>& addresses,
                                               const std::vector<GrpcWorkerClient*>& all, int n,
                                               int in_flight, int64_t closures, absl::Duration idle,
                                               const WorkersChild& child,
                                               DispatchExecutor* executor) {
  std::vector<std::string> used(addresses.begin(), addresses.begin() + n);
  GrpcHealthChecker checker({}, used);
  CountingHealthChecker rpc_checker(&checker);
  ClusterLiveness liveness(&rpc_checker);
  CountingHealthChecker watch_checker(&liveness), probe_checker(&liveness);
  std::vector<int64_t> sent_ns(closures, 0);
  std::vector<double> latency(closures, 0);
  std::vector<std::unique_ptr<bench::StampingClient>> clients;
  std::vector<WorkerClient*> client_ptrs;
  for (int w = 0; w < n; ++w) {
    clients.push_back(std::make_unique<bench::StampingClient>(all[w], &sent_ns));
    client_ptrs.push_back(clients.back().get());
  }
  HealthWatch::Options wo;
  wo.health = &watch_checker;
  wo.workers = client_ptrs;
  wo.interval = absl::Seconds(absl::GetFlag(FLAGS_health_interval_s));
  wo.event = [](const std::string&, const std::string&) {};
  HealthWatch watch(wo);
  ClosureQueue queue;
  for (int64_t id = 0; id < closures; ++id) {
    Closure c;
    c.id = id;
    c.split_index = id;
    c.mode = NOOP;
    queue.Put(std::move(c));
  }
  std::atomic<bool> done{false};
  std::atomic<int> max_threads{0};
  std::thread sampler([&] {
    while (!done) {
      max_threads = std::max(max_threads.load(), bench::ThreadsOf(getpid()));
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  const double cpu0 = bench::ProcessCpuSeconds(getpid());
  const double child0 = child.CpuSeconds();
  const absl::Time start = absl::Now();
  ClusterProbe::Options po;
  po.num_workers = n;
  po.interval = absl::Seconds(absl::GetFlag(FLAGS_probe_interval_s));
  // --health=false: neither poller runs (what health checking costs is the
  // difference in coordinator CPU).
  const bool health = absl::GetFlag(FLAGS_health);
  auto probe = health ? std::make_unique<ClusterProbe>(&probe_checker, po) : nullptr;
  if (health) watch.Start();
  std::vector<std::thread> pool;
  std::unique_ptr<Dispatcher> dispatcher;
  if (executor != nullptr) dispatcher = std::make_unique<Dispatcher>(&queue, executor);
  std::vector<DispatchOptions> options(n);
  for (int w = 0; w < n; ++w) {
    DispatchOptions& d = options[w];
    d.job_id = kJobId;
    d.mode = NOOP;
    d.worker_index = w;
    d.max_attempts = 1;  // a failed no-op is a bench failure, not something to retry
    d.worker_down = watch.worker_down(w);
    d.health_stopped = watch.stopped();
    d.worker_losses = watch.worker_losses(w);
    d.worker_answers = watch.worker_answers(w);
    d.on_success = [&](const Closure& c, const RunClosureResponse&) {
      latency[c.id] = (absl::GetCurrentTimeNanos() - sent_ns[c.id]) / 1e6;
    };
    if (dispatcher != nullptr) {
      dispatcher->Start(clients[w].get(), d, in_flight);
      continue;
    }
    for (int k = 0; k < in_flight; ++k) {
      pool.emplace_back(
          [&queue, &options, w, c = clients[w].get()] { RunDispatchLoop(c, &queue, options[w]); });
    }
  }
  const absl::Status s = queue.Wait();
  const absl::Duration elapsed = absl::Now() - start;
  const double cpu = bench::ProcessCpuSeconds(getpid()) - cpu0;
  const double child_cpu = child.CpuSeconds() - child0;
  for (auto& t : pool) t.join();
  if (dispatcher != nullptr) dispatcher->Join();
  const int64_t calls0 = rpc_checker.calls();
  const double idle_cpu0 = bench::ProcessCpuSeconds(getpid());
  const absl::Time idle_start = absl::Now();
  absl::SleepFor(idle);
  const double idle_seconds = absl::ToDoubleSeconds(absl::Now() - idle_start);
  const int64_t idle_calls = rpc_checker.calls() - calls0;
  const double idle_cpu = bench::ProcessCpuSeconds(getpid()) - idle_cpu0;
  watch.Join();
  probe.reset();
  done = true;
  sampler.join();
  if (!s.ok()) return s;
  DispatchPoint p;
  p.workers = n;
  p.seconds = absl::ToDoubleSeconds(elapsed);
  p.rate = closures / p.seconds;
  p.p50_ms = bench::Percentile(&latency, 0.50);
  p.p99_ms = bench::Percentile(&latency, 0.99);
  p.coord_cpu_us = cpu * 1e6 / closures;
  p.worker_cpu_us = child_cpu * 1e6 / closures;
  p.health_rps = (rpc_checker.calls() - idle_calls) / p.seconds;
  p.saved_rps = liveness.worker_checks_saved() / p.seconds;
  p.health_cpu_share =
      cpu > 0 ? (watch_checker.cpu_seconds() + probe_checker.cpu_seconds()) / cpu : 0;
  p.health_failed = watch_checker.failed() + probe_checker.failed();
  p.threads = max_threads;
  p.idle_rps = idle_seconds > 0 ? idle_calls / idle_seconds : 0;
  p.idle_cores = idle_seconds > 0 ? idle_cpu / idle_seconds : 0;
  return p;
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

int RunDispatchMode(std::vector<int> counts) {
  const bool quick = absl::GetFlag(FLAGS_quick);
  if (quick) counts = {2, 8};
  const int in_flight = absl::GetFlag(FLAGS_in_flight);
  const int64_t closures_flag = quick ? 2000 : absl::GetFlag(FLAGS_closures);
  const int repeats = quick ? 1 : absl::GetFlag(FLAGS_repeats);
  const absl::Duration idle = absl::Seconds(quick ? 0.5 : absl::GetFlag(FLAGS_idle_s));
  if (in_flight < 1 || closures_flag < 1 || repeats < 1 ||
      !(absl::GetFlag(FLAGS_health_interval_s) > 0) ||
      !(absl::GetFlag(FLAGS_probe_interval_s) > 0) || idle < absl::ZeroDuration()) {
    std::cerr << "scale_bench: --in_flight, --closures, --repeats and the intervals must be "
                 "positive, --idle_s >= 0\n";
    return kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_dispatch) != "async" && absl::GetFlag(FLAGS_dispatch) != "threads") {
    std::cerr << "scale_bench: --dispatch must be async or threads, got '"
              << absl::GetFlag(FLAGS_dispatch) << "'\n";
    return kExitBadFlags;
  }
  const int max_workers = *std::max_element(counts.begin(), counts.end());
  const absl::Time t0 = absl::Now();
  auto child = WorkersChild::Start(max_workers);
  if (!child.ok()) {
    std::cerr << "scale_bench: " << child.status() << "\n";
    return 1;
  }
  std::cerr << "scale_bench: " << max_workers << " worker servers up in the child in "
            << absl::FormatDuration(absl::Now() - t0) << "\n";
  const std::vector<std::string>& addresses = (*child)->addresses();
  absl::StatusOr<SetupJobRequest> setup = bench::NoopSetupJob(kJobId);
  if (!setup.ok()) {
    std::cerr << "job spec: " << setup.status() << "\n";
    return 1;
  }
  std::vector<std::unique_ptr<GrpcWorkerClient>> clients;
  std::vector<GrpcWorkerClient*> client_ptrs;
  for (int w = 0; w < max_workers; ++w) {
    clients.push_back(std::make_unique<GrpcWorkerClient>(addresses[w]));
    client_ptrs.push_back(clients.back().get());
    SetupJobResponse response;
    if (absl::Status s = clients.back()->SetupJob(*setup, &response); !s.ok()) {
      std::cerr << "SetupJob on worker " << w << ": " << s << "\n";
      return 1;
    }
  }
  // One executor for every point, as a coordinator's job has one.
  std::unique_ptr<DispatchExecutor> executor;
  if (absl::GetFlag(FLAGS_dispatch) == "async") executor = std::make_unique<DispatchExecutor>();
  std::vector<std::vector<DispatchPoint>> runs(counts.size());
  for (int r = -1; r < repeats; ++r) {  // r = -1: untimed warm-up (channels, threads)
    for (size_t i = 0; i < counts.size(); ++i) {
      const int n = counts[i];
      const int64_t closures =
          r < 0 ? int64_t{8} * n : std::max<int64_t>(closures_flag, int64_t{8} * n);
      auto p = RunDispatchPoint(addresses, client_ptrs, n, in_flight, closures,
                                r < 0 ? absl::ZeroDuration() : idle, **child, executor.get());
      if (!p.ok()) {
        std::cerr << "dispatch with " << n << " worker(s): " << p.status() << "\n";
        return 1;
      }
      if (r < 0) continue;
      std::cerr << absl::StrFormat(
          "  repeat %d: %4d workers: %.0f closures/s, coordinator %.1f us/closure, p50 %.2f ms "
          "p99 %.2f ms, health %.0f RPC/s (%.0f checks/s without one), %d threads\n",
          r + 1, n, p->rate, p->coord_cpu_us, p->p50_ms, p->p99_ms, p->health_rps, p->saved_rps,
          p->threads);
      runs[i].push_back(*p);
    }
  }
  std::cout
      << "\n| workers | closures/s | coordinator CPU us/closure | worker-side CPU us/closure "
         "| p50 ms | p99 ms | health-check RPC/s | checks answered without an RPC/s "
         "| health share of coordinator CPU | coordinator threads | idle: health RPC/s "
         "| idle: coordinator cores |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::string json =
      absl::StrCat("{\"mode\": \"dispatch\", \"date\": ", bench::JsonString(bench::UtcNow()),
                   ", \"load\": ", bench::JsonString(bench::LoadAverage()),
                   ", \"in_flight\": ", in_flight, ", \"points\": [");
  for (size_t i = 0; i < counts.size(); ++i) {
    auto med = [&](double DispatchPoint::*f) {
      std::vector<double> v;
      for (const DispatchPoint& p : runs[i]) v.push_back(p.*f);
      return bench::Median(v);
    };
    int threads = 0;
    int64_t failed = 0;
    for (const DispatchPoint& p : runs[i]) {
      threads = std::max(threads, p.threads);
      failed += p.health_failed;
    }
    std::cout << absl::StrFormat(
        "| %d | %.0f | %.1f | %.1f | %.2f | %.2f | %.0f | %.0f | %.0f %% | %d | %.0f | %.3f |\n",
        counts[i], med(&DispatchPoint::rate), med(&DispatchPoint::coord_cpu_us),
        med(&DispatchPoint::worker_cpu_us), med(&DispatchPoint::p50_ms),
        med(&DispatchPoint::p99_ms), med(&DispatchPoint::health_rps),
        med(&DispatchPoint::saved_rps), 100 * med(&DispatchPoint::health_cpu_share), threads,
        med(&DispatchPoint::idle_rps), med(&DispatchPoint::idle_cores));
    absl::StrAppend(
        &json, i ? ", " : "", "{\"workers\": ", counts[i],
        ", \"closures_per_sec\": ", bench::JsonNumber(med(&DispatchPoint::rate)),
        ", \"coordinator_cpu_us_per_closure\": ",
        bench::JsonNumber(med(&DispatchPoint::coord_cpu_us)),
        ", \"worker_cpu_us_per_closure\": ", bench::JsonNumber(med(&DispatchPoint::worker_cpu_us)),
        ", \"p50_ms\": ", bench::JsonNumber(med(&DispatchPoint::p50_ms)),
        ", \"p99_ms\": ", bench::JsonNumber(med(&DispatchPoint::p99_ms)),
        ", \"health_rpc_per_sec\": ", bench::JsonNumber(med(&DispatchPoint::health_rps)),
        ", \"checks_without_rpc_per_sec\": ", bench::JsonNumber(med(&DispatchPoint::saved_rps)),
        ", \"health_cpu_share\": ", bench::JsonNumber(med(&DispatchPoint::health_cpu_share)),
        ", \"health_checks_failed\": ", failed, ", \"coordinator_threads\": ", threads,
        ", \"idle_health_rpc_per_sec\": ", bench::JsonNumber(med(&DispatchPoint::idle_rps)),
        ", \"idle_coordinator_cores\": ", bench::JsonNumber(med(&DispatchPoint::idle_cores)),
        ", \"seconds\": ", bench::JsonNumber(med(&DispatchPoint::seconds)), "}");
  }
  json += "]}\n";
  const std::string out = absl::GetFlag(FLAGS_output_json);
  if (!out.empty()) std::ofstream(out) << json;
  return 0;
}

void RaiseFileLimit() {
  rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "How pscluster's costs grow with workers and PS tasks.\n"
      "  scale_bench --mode=dispatch|ps_connections|push_pull [--quick] [--output_json=PATH]");
  absl::ParseCommandLine(argc, argv);
  RaiseFileLimit();
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  const std::string mode = absl::GetFlag(FLAGS_mode);
  auto counts = Ints(absl::GetFlag(FLAGS_workers), "workers");
  if (!counts.ok()) {
    std::cerr << "scale_bench: " << counts.status().message() << "\n";
    return kExitBadFlags;
  }
  if (mode == "workers") {
    if (counts->size() != 1 || absl::GetFlag(FLAGS_port_file).empty()) {
      std::cerr << "scale_bench: --mode=workers needs one --workers count and --port_file\n";
      return kExitBadFlags;
    }
    return RunWorkersChild(counts->front(), absl::GetFlag(FLAGS_port_file));
  }
  if (mode != "dispatch" && mode != "ps_connections" && mode != "push_pull") {
    std::cerr << "scale_bench: --mode must be dispatch, ps_connections or push_pull, got '" << mode
              << "'\n";
    return kExitBadFlags;
  }
  std::cerr << "scale_bench: " << mode << ", " << bench::UtcNow() << ", load "
            << bench::LoadAverage() << ", " << std::thread::hardware_concurrency() << " CPUs ("
            << bench::CpuModel() << ")\n";
  if (mode == "dispatch") return RunDispatchMode(*counts);
  if (mode == "ps_connections") {
    return bench::RunPsConnectionsMode(absl::GetFlag(FLAGS_quick),
                                       absl::GetFlag(FLAGS_output_json));
  }
  return bench::RunPushPullMode(absl::GetFlag(FLAGS_quick), absl::GetFlag(FLAGS_output_json));
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
