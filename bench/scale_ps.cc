#include "bench/scale_ps.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_util.h"
#include "bench/data_plane_cluster.h"
#include "bench/ps_child.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "ps/service/remote_ps_client.h"

ABSL_FLAG(std::string, ps_server_bin, ".bazel/bin/ps/ps_server",
          "ps_connections: the ps_server binary.");
ABSL_FLAG(std::vector<std::string>, connections,
          std::vector<std::string>({"0", "100", "500", "1000", "2000"}),
          "ps_connections: idle clients after each step (increasing).");
ABSL_FLAG(std::vector<std::string>, push_pull_shapes,
          std::vector<std::string>({"1x1", "1x4", "1x16", "4x4", "4x16", "16x4", "16x16", "32x4",
                                    "32x16"}),
          "push_pull: PxW shapes (P PS, W concurrent workers).");
ABSL_FLAG(int, push_pull_rounds, 300, "push_pull: round trips per worker per shape.");

namespace pscluster {
namespace bench {

double ProcessCpuSeconds(pid_t pid) {
  if (pid == getpid()) {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  }
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the parenthesised name (which may hold spaces): state is
  // field 3, utime and stime fields 14 and 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::atof(f.c_str());
    if (i == 15) stime = std::atof(f.c_str());
  }
  return (utime + stime) / sysconf(_SC_CLK_TCK);
}

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

namespace {
int64_t StatusField(pid_t pid, const char* field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + strlen(field));
  }
  return -1;
}
}  // namespace

int ThreadsOf(pid_t pid) { return static_cast<int>(StatusField(pid, "Threads:")); }

int64_t RssOf(pid_t pid) {
  const int64_t kb = StatusField(pid, "VmRSS:");
  return kb < 0 ? -1 : kb * 1024;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

namespace {

constexpr int kExitBadFlags = 2;

struct ConnStep {
  int clients = 0;
  int64_t rss = 0;
  int threads = 0;
  int failed = 0;  // clients whose one pull failed, cumulative
  double add_seconds = 0;
};

// One series: clients added step by step to one fresh ps_server.
absl::StatusOr<std::vector<ConnStep>> RunConnectionSeries(const std::string& bin, bool data_plane,
                                                          const std::vector<int>& steps,
                                                          std::string* first_error,
                                                          std::string* server_log) {
  auto ps = PsServerChild::Start(bin, {"--log_level=warn"});
  if (!ps.ok()) return ps.status();
  RemotePsClient::Options o;
  o.target = (*ps)->target();
  o.wait_for_ready = true;
  o.data_plane = data_plane;
  o.call_timeout = std::chrono::milliseconds(10000);
  RemotePsClient setup(o);
  CreateVariablesRequest create;
  create.set_job("bench");
  VariableSpecProto* spec = create.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(4);
  spec->mutable_initializer()->set_type("zeros");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.1f);
  CreateVariablesResponse created;
  if (absl::Status s = setup.CreateVariables(create, &created); !s.ok()) return s;
  PullRequest pull;
  pull.set_job("bench");
  pull.add_names("w");
  std::vector<std::unique_ptr<RemotePsClient>> clients;
  std::vector<ConnStep> out;
  int failed = 0;
  for (int target : steps) {
    const absl::Time t0 = absl::Now();
    while (static_cast<int>(clients.size()) < target) {
      clients.push_back(std::make_unique<RemotePsClient>(o));
      PullResponse pulled;
      if (absl::Status s = clients.back()->Pull(pull, &pulled); !s.ok()) {
        if (failed++ == 0)
          *first_error = absl::StrCat("client ", clients.size(), ": ", s.message());
      }
    }
    ConnStep step;
    step.clients = target;
    step.add_seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    absl::SleepFor(absl::Milliseconds(500));  // connection threads settle
    step.rss = RssOf((*ps)->pid());
    step.threads = ThreadsOf((*ps)->pid());
    step.failed = failed;
    if (step.rss < 0) return absl::UnavailableError("ps_server is gone");
    out.push_back(step);
    std::cerr << absl::StrFormat("  %s: %5d idle clients: RSS %.1f MiB, %d threads, %d failed\n",
                                 data_plane ? "data_plane" : "grpc_only", target,
                                 step.rss / 1048576.0, step.threads, failed);
  }
  *server_log = (*ps)->LastLogLine("data plane");
  return out;
}

absl::StatusOr<std::vector<int>> ParseList(const std::vector<std::string>& v, const char* flag,
                                           int min) {
  std::vector<int> out;
  for (const std::string& s : v) {
    int x;
    if (!absl::SimpleAtoi(s, &x) || x < min || (!out.empty() && x < out.back())) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", s, "' is not an increasing integer >= ", min));
    }
    out.push_back(x);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

struct PushPullPoint {
  double rate = 0, p50_ms = 0, p99_ms = 0;
};

// One shape: its cluster, then `rounds` fused push+pull round trips per
// worker, all workers at once (5 more untimed first: connections, buffers).
absl::StatusOr<PushPullPoint> RunPushPullShape(const ClusterShape& shape, int64_t bytes,
                                               int rounds) {
  auto cluster = StartCluster(shape, {bytes}, 0, 1, "");
  if (!cluster.ok()) return cluster.status();
  std::vector<std::vector<double>> latency(shape.workers);
  std::vector<absl::Status> status(shape.workers);
  std::vector<std::thread> pool;
  const absl::Time start = absl::Now();
  for (int w = 0; w < shape.workers; ++w) {
    pool.emplace_back([&, w] {
      for (int r = 0; r < rounds + 5; ++r) {
        const int64_t t0 = absl::GetCurrentTimeNanos();
        absl::Status s = RoundTrip(**cluster, kPscluster, 0, w);
        if (!s.ok()) {
          status[w] = s;
          return;
        }
        if (r >= 5) latency[w].push_back((absl::GetCurrentTimeNanos() - t0) / 1e6);
      }
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double> all;
  for (int w = 0; w < shape.workers; ++w) {
    if (!status[w].ok()) return status[w];
    all.insert(all.end(), latency[w].begin(), latency[w].end());
  }
  PushPullPoint p;
  p.rate = all.size() / seconds;
  p.p50_ms = Percentile(&all, 0.5);
  p.p99_ms = Percentile(&all, 0.99);
  return p;
}

}  // namespace

int RunPsConnectionsMode(bool quick, const std::string& output_json) {
  auto steps = ParseList(absl::GetFlag(FLAGS_connections), "connections", 0);
  if (!steps.ok()) {
    std::cerr << "scale_bench: " << steps.status().message() << "\n";
    return kExitBadFlags;
  }
  if (quick) *steps = {0, 20};
  const std::string bin = absl::GetFlag(FLAGS_ps_server_bin);
  std::string json = absl::StrCat("{\"mode\": \"ps_connections\", \"date\": ", JsonString(UtcNow()),
                                  ", \"load\": ", JsonString(LoadAverage()), ", \"series\": [");
  std::cout << "\n| series | idle clients | PS RSS MiB | KiB per client (vs 0) | PS threads | "
               "failed pulls |\n|---|---|---|---|---|---|\n";
  bool first_series = true;
  for (bool data_plane : {true, false}) {
    std::string first_error, server_log;
    auto series = RunConnectionSeries(bin, data_plane, *steps, &first_error, &server_log);
    const char* name = data_plane ? "data_plane" : "grpc_only";
    if (!series.ok()) {
      std::cerr << "scale_bench: ps_connections " << name << ": " << series.status() << "\n";
      return 1;
    }
    absl::StrAppend(&json, first_series ? "" : ", ", "{\"series\": \"", name,
                    "\", \"first_error\": ", JsonString(first_error),
                    ", \"server_log\": ", JsonString(server_log), ", \"steps\": [");
    first_series = false;
    const ConnStep& base = series->front();
    for (size_t i = 0; i < series->size(); ++i) {
      const ConnStep& s = (*series)[i];
      const int added = s.clients - base.clients;
      const double per = added > 0 ? (s.rss - base.rss) / 1024.0 / added : 0;
      std::cout << absl::StrFormat(
          "| %s | %d | %.1f | %s | %d | %d |\n", name, s.clients, s.rss / 1048576.0,
          added > 0 ? absl::StrFormat("%.1f", per) : "-", s.threads, s.failed);
      absl::StrAppend(&json, i ? ", " : "", "{\"clients\": ", s.clients, ", \"rss_bytes\": ", s.rss,
                      ", \"kib_per_client\": ", added > 0 ? JsonNumber(per) : "null",
                      ", \"threads\": ", s.threads, ", \"failed_pulls\": ", s.failed,
                      ", \"add_seconds\": ", JsonNumber(s.add_seconds), "}");
    }
    json += "]}";
    if (!first_error.empty())
      std::cout << "\n" << name << ": first failed pull: " << first_error << "\n";
    if (!server_log.empty()) std::cout << name << ": ps_server says: " << server_log << "\n";
  }
  json += "]}\n";
  if (!output_json.empty()) std::ofstream(output_json) << json;
  return 0;
}

int RunPushPullMode(bool quick, const std::string& output_json) {
  std::vector<std::string> shape_flags = absl::GetFlag(FLAGS_push_pull_shapes);
  int rounds = absl::GetFlag(FLAGS_push_pull_rounds);
  if (quick) {
    shape_flags = {"1x1", "2x2"};
    rounds = 50;
  }
  std::vector<ClusterShape> shapes;
  for (const std::string& text : shape_flags) {
    // ParseShape bounds P and W at data_plane_bench's 16; the scale harness
    // goes to 32 PS with the same parse.
    ClusterShape shape;
    const size_t x = text.find('x');
    if (x == std::string::npos || !absl::SimpleAtoi(text.substr(0, x), &shape.ps) ||
        !absl::SimpleAtoi(text.substr(x + 1), &shape.workers) || shape.ps < 1 || shape.ps > 64 ||
        shape.workers < 1 || shape.workers > 64) {
      std::cerr << "scale_bench: --push_pull_shapes: '" << text
                << "' is not PxW with 1 <= P, W <= 64\n";
      return kExitBadFlags;
    }
    shape.label = text;
    shapes.push_back(shape);
  }
  if (rounds < 1) {
    std::cerr << "scale_bench: --push_pull_rounds must be >= 1\n";
    return kExitBadFlags;
  }
  constexpr int64_t kBytes = 4096;  // the whole variable, split over the PS
  std::cout << "\n| PS | workers | round trips/s | p50 ms | p99 ms |\n|---|---|---|---|---|\n";
  std::string json = absl::StrCat("{\"mode\": \"push_pull\", \"date\": ", JsonString(UtcNow()),
                                  ", \"load\": ", JsonString(LoadAverage()),
                                  ", \"variable_bytes\": ", kBytes, ", \"points\": [");
  // A shape that fails (on 2 busy cores, the largest may time out connecting)
  // is reported as failed, and the others still run.
  int failures = 0;
  auto failed = [&](size_t i, const ClusterShape& shape, const absl::Status& s) {
    std::cerr << "scale_bench: push_pull " << shape.label << ": " << s << "\n";
    std::cout << absl::StrFormat("| %d | %d | failed: %s | | |\n", shape.ps, shape.workers,
                                 s.message());
    absl::StrAppend(&json, i ? ", " : "", "{\"ps\": ", shape.ps, ", \"workers\": ", shape.workers,
                    ", \"error\": ", JsonString(std::string(s.message())), "}");
    ++failures;
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ClusterShape& shape = shapes[i];
    // Retried once: on 2 busy cores the largest shapes' gRPC connections may
    // time out ("tcp handshaker shutdown"), which says nothing of the PS.
    absl::StatusOr<PushPullPoint> p = RunPushPullShape(shape, kBytes, rounds);
    if (!p.ok()) {
      std::cerr << "scale_bench: push_pull " << shape.label << ": " << p.status()
                << "; retrying once\n";
      p = RunPushPullShape(shape, kBytes, rounds);
    }
    if (!p.ok()) {
      failed(i, shape, p.status());
      continue;
    }
    std::cout << absl::StrFormat("| %d | %d | %.0f | %.3f | %.3f |\n", shape.ps, shape.workers,
                                 p->rate, p->p50_ms, p->p99_ms);
    absl::StrAppend(&json, i ? ", " : "", "{\"ps\": ", shape.ps, ", \"workers\": ", shape.workers,
                    ", \"round_trips_per_sec\": ", JsonNumber(p->rate),
                    ", \"p50_ms\": ", JsonNumber(p->p50_ms),
                    ", \"p99_ms\": ", JsonNumber(p->p99_ms), "}");
  }
  json += "]}\n";
  if (!output_json.empty()) std::ofstream(output_json) << json;
  return failures == 0 ? 0 : 1;
}

}  // namespace bench
}  // namespace pscluster
