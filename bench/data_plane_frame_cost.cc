// data_plane_frame_cost: what one data-plane round trip costs a real
// ps_server process, the server's side only: its CPU time (the sum of its
// threads' time on a CPU, /proc/PID/task/*/schedstat), its context switches
// (/proc/PID/task/*/status) and, with --perf_events, perf counters (e.g.
// raw_syscalls:sys_enter for its system calls), each divided by the round
// trips. These are far steadier on a busy machine than throughput: they count
// the work the server does per frame, not how long it waited for a core.
//
// For each of --ps_server_bins (any builds: a thread-per-connection binary
// from an older tree and the pool are measured with the same client), in
// turn, --rounds times: a fresh ps_server child serves one keyless job with
// one float variable of --bytes; each of --workers client threads (a
// RemotePsClient each, one data-plane connection) makes --warmup, then
// --round_trips fused push+pull calls, as data_plane_bench's pscluster column
// does. Counters are read around the timed calls only. Prints each binary's
// medians as a markdown table and, with --output_json, JSON lines. perf's
// tracepoints slow the system calls they count: take CPU figures from a run
// without --perf_events.
//
//   data_plane_frame_cost --ps_server_bins=/tmp/a/ps_server,/tmp/b/ps_server --bytes=4096
//   data_plane_frame_cost --ps_server_bins=... --rounds=1 --round_trips=5000
//       --perf_events=raw_syscalls:sys_enter,syscalls:sys_enter_epoll_ctl
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "bench/ps_child.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "ps/service/remote_ps_client.h"

ABSL_FLAG(std::vector<std::string>, ps_server_bins, {},
          "The ps_server binaries to measure, comma-separated, each in turn every round. "
          "Required.");
ABSL_FLAG(int, rounds, 5, "Rounds; each binary's figures are the medians over them.");
ABSL_FLAG(int64_t, bytes, 4096, "The variable's bytes: pushed and pulled each round trip.");
ABSL_FLAG(int64_t, round_trips, 20000, "Timed round trips per worker.");
ABSL_FLAG(int64_t, warmup, 500, "Untimed round trips per worker first.");
ABSL_FLAG(int, workers, 1, "Client threads, each with its own connection.");
ABSL_FLAG(std::string, perf_events, "",
          "If set, `perf stat -e EVENTS -p PID` counts these on the server during the timed "
          "calls (comma-separated perf event names).");
ABSL_FLAG(std::string, output_json, "",
          "If set, one JSON line per binary (its medians) is appended here.");

namespace pscluster {
namespace bench {
namespace {

constexpr int kExitBadFlags = 2;

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

struct ServerCounters {
  int64_t cpu_ns = 0;
  int64_t voluntary_switches = 0;
  int64_t involuntary_switches = 0;
  int threads = 0;
};

// Sums the counters of every thread of `pid` now.
ServerCounters ReadCounters(pid_t pid) {
  ServerCounters c;
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return c;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = absl::StrCat(dir, "/", e->d_name);
    std::ifstream schedstat(task + "/schedstat");
    int64_t on_cpu = 0;
    if (schedstat >> on_cpu) c.cpu_ns += on_cpu;
    std::ifstream status(task + "/status");
    std::string line;
    while (std::getline(status, line)) {
      int64_t value = 0;
      const std::vector<std::string> parts = absl::StrSplit(line, ':');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &value)) continue;
      if (parts[0] == "voluntary_ctxt_switches") c.voluntary_switches += value;
      if (parts[0] == "nonvoluntary_ctxt_switches") c.involuntary_switches += value;
    }
    ++c.threads;
  }
  closedir(d);
  return c;
}

// `perf stat` attached to a process; counts until Stop.
class PerfStat {
 public:
  absl::Status Start(pid_t pid, const std::string& events) {
    path_ = absl::StrCat("/tmp/data_plane_frame_cost.", getpid(), ".perf");
    std::vector<std::string> args = {"perf", "stat", "-x",   ",",  "-o",
                                     path_,  "-e",   events, "-p", std::to_string(pid)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawnp(&pid_, "perf", nullptr, nullptr, argv.data(), environ);
    if (rc != 0) return absl::NotFoundError(absl::StrCat("cannot run perf: ", strerror(rc)));
    absl::SleepFor(absl::Milliseconds(500));  // until its counters are open
    return absl::OkStatus();
  }

  // Stops it and returns event name -> count.
  std::map<std::string, double> Stop() {
    std::map<std::string, double> counts;
    if (pid_ <= 0) return counts;
    kill(pid_, SIGINT);
    int status = 0;
    waitpid(pid_, &status, 0);
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      const std::vector<std::string> f = absl::StrSplit(line, ',');
      double value = 0;
      if (f.size() >= 3 && absl::SimpleAtod(f[0], &value)) counts[f[2]] = value;
    }
    unlink(path_.c_str());
    return counts;
  }

 private:
  pid_t pid_ = -1;
  std::string path_;
};

struct Sample {
  double cpu_us = 0;     // server CPU per round trip
  double voluntary = 0;  // server context switches per round trip
  double involuntary = 0;
  double client_us = 0;                  // wall time per round trip, per worker
  int threads = 0;                       // the server's, after
  std::map<std::string, double> counts;  // perf events per round trip
};

// One ps_server of `bin`, its warm-up and timed round trips.
absl::StatusOr<Sample> Measure(const std::string& bin, int64_t bytes, int64_t round_trips,
                               int64_t warmup, int workers, const std::string& events) {
  auto ps = PsServerChild::Start(bin, {"--log_level=warn"});
  if (!ps.ok()) return ps.status();
  RemotePsClient::Options o;
  o.target = (*ps)->target();
  o.wait_for_ready = true;
  o.call_timeout = std::chrono::milliseconds(30000);
  std::vector<std::unique_ptr<RemotePsClient>> clients;
  for (int w = 0; w < workers; ++w) clients.push_back(std::make_unique<RemotePsClient>(o));

  CreateVariablesRequest create;
  create.set_job("bench");
  VariableSpecProto* spec = create.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(bytes / 4);
  spec->mutable_initializer()->set_type("zeros");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.01f);
  CreateVariablesResponse created;
  if (absl::Status s = clients[0]->CreateVariables(create, &created); !s.ok()) return s;
  PushRequest request;
  request.set_job("bench");
  NamedTensor* gradient = request.add_gradients();
  gradient->set_name("w");
  EncodeTensor(Shape{bytes / 4}, std::vector<float>(static_cast<size_t>(bytes / 4), 1e-3f),
               gradient->mutable_tensor());
  request.mutable_pull()->add_names("w");

  std::vector<absl::Status> status(static_cast<size_t>(workers));
  auto calls = [&](int64_t n) {
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        PushResponse response;
        for (int64_t i = 0; i < n && status[w].ok(); ++i) {
          status[w] = clients[w]->StartPush(request, &response)->Wait();
          if (status[w].ok() &&
              (response.pulled().tensors_size() != 1 ||
               static_cast<int64_t>(response.pulled().tensors(0).tensor().data().size()) !=
                   bytes)) {
            status[w] = absl::InternalError("push+pull returned the wrong size");
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& s : status) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  if (absl::Status s = calls(warmup); !s.ok()) return s;
  PerfStat perf;
  if (!events.empty()) {
    if (absl::Status s = perf.Start((*ps)->pid(), events); !s.ok()) return s;
  }
  const ServerCounters before = ReadCounters((*ps)->pid());
  const absl::Time start = absl::Now();
  const absl::Status timed = calls(round_trips);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const ServerCounters after = ReadCounters((*ps)->pid());
  const std::map<std::string, double> counts = perf.Stop();
  if (!timed.ok()) return timed;
  const double n = static_cast<double>(round_trips * workers);
  Sample out;
  out.cpu_us = (after.cpu_ns - before.cpu_ns) / n / 1e3;
  out.voluntary = (after.voluntary_switches - before.voluntary_switches) / n;
  out.involuntary = (after.involuntary_switches - before.involuntary_switches) / n;
  out.client_us = seconds / n * 1e6 * workers;
  out.threads = after.threads;
  for (const auto& [event, count] : counts) out.counts[event] = count / n;
  return out;
}

int Run() {
  const std::vector<std::string> bins = absl::GetFlag(FLAGS_ps_server_bins);
  const int64_t bytes = absl::GetFlag(FLAGS_bytes);
  const int64_t round_trips = absl::GetFlag(FLAGS_round_trips);
  const int64_t warmup = absl::GetFlag(FLAGS_warmup);
  const int workers = absl::GetFlag(FLAGS_workers);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (bins.empty() || bytes < 4 || bytes % 4 != 0 || round_trips < 1 || warmup < 0 || workers < 1 ||
      workers > 64 || rounds < 1) {
    std::cerr << "data_plane_frame_cost: --ps_server_bins is required; --bytes a positive "
                 "multiple of 4, --round_trips >= 1, --warmup >= 0, 1 <= --workers <= 64, "
                 "--rounds >= 1\n";
    return kExitBadFlags;
  }
  std::vector<std::vector<Sample>> samples(bins.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t b = 0; b < bins.size(); ++b) {
      std::cerr << "round " << r + 1 << "/" << rounds << ": " << bins[b] << "\n";
      absl::StatusOr<Sample> sample =
          Measure(bins[b], bytes, round_trips, warmup, workers, absl::GetFlag(FLAGS_perf_events));
      if (!sample.ok()) {
        std::cerr << "data_plane_frame_cost: " << bins[b] << ": " << sample.status() << "\n";
        return 1;
      }
      samples[b].push_back(*std::move(sample));
    }
  }
  std::cout << "\n"
            << SizeLabel(bytes) << ", " << workers << " worker(s), " << round_trips
            << " round trips each, medians of " << rounds << " rounds; load " << LoadAverage()
            << "\n\n| ps_server | server CPU us / round trip | voluntary switches | "
               "involuntary switches | client us / round trip | server threads |";
  for (const auto& [event, count] : samples[0][0].counts) std::cout << " " << event << " |";
  std::cout << "\n|---|---|---|---|---|---|";
  for (size_t i = 0; i < samples[0][0].counts.size(); ++i) std::cout << "---|";
  std::cout << "\n";
  std::string json;
  for (size_t b = 0; b < bins.size(); ++b) {
    auto median = [&](auto field) {
      std::vector<double> v;
      for (const Sample& s : samples[b]) v.push_back(field(s));
      return Median(v);
    };
    const double cpu = median([](const Sample& s) { return s.cpu_us; });
    const double voluntary = median([](const Sample& s) { return s.voluntary; });
    const double involuntary = median([](const Sample& s) { return s.involuntary; });
    const double client = median([](const Sample& s) { return s.client_us; });
    std::cout << absl::StrFormat("| %s | %.2f | %.2f | %.2f | %.1f | %d |", bins[b], cpu, voluntary,
                                 involuntary, client, samples[b].back().threads);
    absl::StrAppend(&json, "{\"ps_server\": ", JsonString(bins[b]), ", \"bytes\": ", bytes,
                    ", \"workers\": ", workers, ", \"round_trips\": ", round_trips,
                    ", \"rounds\": ", rounds, ", \"load\": ", JsonString(LoadAverage()),
                    ", \"date\": ", JsonString(UtcNow()),
                    ", \"server_cpu_us_per_round_trip\": ", JsonNumber(cpu),
                    ", \"server_voluntary_switches_per_round_trip\": ", JsonNumber(voluntary),
                    ", \"server_involuntary_switches_per_round_trip\": ", JsonNumber(involuntary),
                    ", \"client_us_per_round_trip\": ", JsonNumber(client));
    for (const auto& [event, count] : samples[b][0].counts) {
      const double m = median([&event = event](const Sample& s) {
        auto it = s.counts.find(event);
        return it == s.counts.end() ? 0.0 : it->second;
      });
      std::cout << absl::StrFormat(" %.2f |", m);
      absl::StrAppend(&json, ", ", JsonString(event + " per round trip"), ": ", JsonNumber(m));
    }
    std::cout << "\n";
    json += "}\n";
  }
  if (!absl::GetFlag(FLAGS_output_json).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_output_json), std::ios::app) << json;
  }
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace pscluster

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pscluster::bench::Run();
}
