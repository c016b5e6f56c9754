// checkpoint_bench: checkpoint time per GiB (issue 25). Real ps_server
// processes (bench/ps_child.h), all with --checkpoint_root=<dir>, hold
// --sizes_mib of dense float32 variables in total (--var_mib each, SGD: no
// slots, so the data files are the parameter bytes), laid out over P PS by
// the coordinator's rules (PlanVariables, FixedShardsPartitioner(P): every
// variable is split into P shards, one per PS). For each size and each P in
// --ps:
//   save    - CheckpointManager::Save through RemotePsClient, the calls the
//             coordinator makes at a checkpoint (every PS writes, fsyncs and
//             renames its data file at once; then the MANIFEST is written
//             durably; then older checkpoints beyond keep=1 are deleted). The
//             time is the training pause: the coordinator holds pushes for it;
//   restore - CheckpointManager::Restore of that checkpoint into a fresh set
//             of P' ps_server processes for each P' in --restore_ps (P' != P
//             re-shards: FixedShardsPartitioner(P'), each PS reads every data
//             file, verifies its checksum, and takes the rows it owns). The
//             data files are dropped from the page cache first
//             (posix_fadvise DONTNEED) so reads come from the disk.
// Baselines, in the same run, the same bytes in the same directory:
//   raw write - P threads each write total/P bytes to a file in 64 MiB
//               write(2)s and fsync it (dd conv=fsync), timed until all are
//               done;
//   raw read  - one cold read(2) pass over the checkpoint's data files (after
//               DONTNEED), in the same P threads.
// save / raw write says how close a save is to the disk; restore / raw read
// likewise (a restoring PS reads every file twice: verify, then fill).
//
// Memory: at most one set of PS is up at a time; the PS hold the size once
// plus their 64 MiB record buffers.
//
// Exit codes: 0 success, 1 a server or call failed, 2 bad flags.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
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
#include "bench/bench_util.h"
#include "bench/ps_child.h"
#include "common/checkpoint_file.h"
#include "common/model_variables.h"
#include "common/partitioner.h"
#include "coordinator/core/checkpoint_manager.h"
#include "protos/checkpoint.pb.h"
#include "protos/ps.pb.h"
#include "ps/service/remote_ps_client.h"

ABSL_FLAG(std::string, ps_server_bin, ".bazel/bin/ps/ps_server", "The ps_server binary.");
ABSL_FLAG(std::vector<std::string>, sizes_mib, std::vector<std::string>({"256", "512", "1024"}),
          "Total variable MiB of each case.");
ABSL_FLAG(std::vector<std::string>, ps, std::vector<std::string>({"1", "2", "4"}),
          "PS counts that save.");
ABSL_FLAG(std::vector<std::string>, restore_ps, std::vector<std::string>({"1", "2", "4"}),
          "PS counts each checkpoint is restored into.");
ABSL_FLAG(int64_t, var_mib, 32, "MiB per logical variable.");
ABSL_FLAG(int, repeats, 2, "Saves per case (and raw writes); the median is reported.");
ABSL_FLAG(std::string, dir, "",
          "Checkpoint directory (created; emptied at the end). Default: a new "
          "directory under /tmp.");
ABSL_FLAG(std::string, output_json, "", "If set, the results are also written here as JSON.");

namespace pscluster {
namespace {

constexpr int kExitBadFlags = 2;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr double kGiB = 1073741824.0;
constexpr int64_t kRawChunk = 64 * kMiB;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// `count` ps_server children sharing `root` as their checkpoint root, and a
// client per child with a deadline long enough for a save or a restore.
struct PsSet {
  std::vector<std::unique_ptr<bench::PsServerChild>> servers;
  std::vector<std::unique_ptr<RemotePsClient>> clients;
  std::vector<PsClient*> raw() const {
    std::vector<PsClient*> out;
    for (const auto& c : clients) out.push_back(c.get());
    return out;
  }
};

absl::StatusOr<PsSet> StartPs(const std::string& bin, const std::string& root, int count) {
  PsSet set;
  for (int i = 0; i < count; ++i) {
    auto child = bench::PsServerChild::Start(bin, {absl::StrCat("--checkpoint_root=", root)});
    if (!child.ok()) return child.status();
    RemotePsClient::Options options;
    options.target = (*child)->target();
    options.call_timeout = std::chrono::minutes(10);
    set.clients.push_back(std::make_unique<RemotePsClient>(options));
    set.servers.push_back(*std::move(child));
  }
  return set;
}

std::vector<VariableSpecProto> Variables(int64_t total_mib, int64_t var_mib) {
  std::vector<VariableSpecProto> vars;
  const int64_t rows = var_mib * kMiB / (64 * 4);  // rows of 64 floats
  for (int64_t i = 0; i * var_mib < total_mib; ++i) {
    VariableSpecProto v;
    v.set_name(absl::StrFormat("layer_%03d/kernel", i));
    v.set_dtype(DT_FLOAT32);
    v.add_shape(rows);
    v.add_shape(64);
    v.mutable_initializer()->set_type("random_uniform");
    v.mutable_initializer()->set_minval(-0.05f);
    v.mutable_initializer()->set_maxval(0.05f);
    v.mutable_optimizer()->set_type("sgd");
    v.mutable_optimizer()->set_learning_rate(0.01f);
    vars.push_back(std::move(v));
  }
  return vars;
}

absl::StatusOr<VariablePlan> Plan(const std::vector<VariableSpecProto>& vars, int num_ps) {
  absl::StatusOr<VariablePlan> plan = PlanVariables(vars, PartitionerSpec::Fixed(num_ps), num_ps);
  if (!plan.ok()) return plan;
  // As the coordinator's requests: the job, and its checkpoint directory
  // (here the checkpoint root itself), without which a Save is refused.
  for (CreateVariablesRequest& r : plan->per_ps) {
    r.set_job("bench");
    r.set_checkpoint_dir(".");
  }
  return plan;
}

// Creates the plan's variables on every PS, in parallel as the coordinator does.
absl::Status Create(const VariablePlan& plan, PsSet& set) {
  std::vector<absl::Status> status(set.clients.size());
  std::vector<std::thread> threads;
  for (size_t p = 0; p < set.clients.size(); ++p) {
    threads.emplace_back([&, p] {
      CreateVariablesResponse response;
      status[p] = set.clients[p]->CreateVariables(plan.per_ps[p], &response);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Drops `path` from the page cache (written back first).
void DropCache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

// `threads` writers, each `bytes / threads` to its own file under `dir` in
// 64 MiB writes, then fsync; the files are removed afterwards. Seconds.
absl::StatusOr<double> RawWrite(const std::string& dir, int64_t bytes, int threads) {
  std::vector<absl::Status> status(threads);
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const std::string path = absl::StrCat(dir, "/raw-", t);
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) {
        status[t] = absl::InternalError(absl::StrCat("open ", path));
        return;
      }
      std::vector<char> buffer(kRawChunk, static_cast<char>(t + 1));
      for (int64_t left = bytes / threads; left > 0;) {
        const ssize_t n = write(fd, buffer.data(), std::min<int64_t>(left, kRawChunk));
        if (n <= 0) {
          status[t] = absl::InternalError(absl::StrCat("write ", path));
          break;
        }
        left -= n;
      }
      if (fsync(fd) != 0) status[t] = absl::InternalError(absl::StrCat("fsync ", path));
      close(fd);
    });
  }
  for (auto& w : workers) w.join();
  const double seconds = Seconds(start);
  for (int t = 0; t < threads; ++t) std::filesystem::remove(absl::StrCat(dir, "/raw-", t));
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return seconds;
}

// One cold read pass over `paths` in `threads` threads. Seconds.
double RawRead(const std::vector<std::string>& paths, int threads) {
  for (const std::string& p : paths) DropCache(p);
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<char> buffer(8 * kMiB);
      for (size_t i = t; i < paths.size(); i += threads) {
        const int fd = open(paths[i].c_str(), O_RDONLY);
        if (fd < 0) continue;
        while (read(fd, buffer.data(), buffer.size()) > 0) {
        }
        close(fd);
      }
    });
  }
  for (auto& w : workers) w.join();
  return Seconds(start);
}

struct Row {
  int64_t mib = 0;
  int ps = 0;
  int64_t file_bytes = 0;
  double save_s = 0, raw_write_s = 0, raw_read_s = 0;
  std::vector<std::pair<int, double>> restore_s;  // (P', seconds)
};

absl::StatusOr<Row> RunCase(const std::string& bin, const std::string& dir, int64_t mib, int num_ps,
                            const std::vector<int>& restore_ps, int repeats) {
  Row row;
  row.mib = mib;
  row.ps = num_ps;
  const std::vector<VariableSpecProto> vars = Variables(mib, absl::GetFlag(FLAGS_var_mib));
  absl::StatusOr<VariablePlan> plan = Plan(vars, num_ps);
  if (!plan.ok()) return plan.status();
  const std::string case_dir = absl::StrCat(dir, "/", mib, "mib-", num_ps, "ps");
  std::filesystem::create_directories(case_dir);
  CheckpointManager manager(case_dir, /*keep=*/1, "bench");
  CheckpointManifest manifest;
  {
    absl::StatusOr<PsSet> set = StartPs(bin, case_dir, num_ps);
    if (!set.ok()) return set.status();
    if (absl::Status s = Create(*plan, *set); !s.ok()) return s;
    std::vector<int> expected;
    for (const auto& r : plan->per_ps) expected.push_back(r.variables_size());
    std::vector<double> saves, raws;
    for (int i = 0; i < repeats; ++i) {
      // Raw write first, so both start from the same page-cache state.
      absl::StatusOr<double> raw = RawWrite(case_dir, mib * kMiB, num_ps);
      if (!raw.ok()) return raw.status();
      raws.push_back(*raw);
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<CheckpointManifest> saved =
          manager.Save(set->raw(), expected, CheckpointManifest());
      if (!saved.ok()) return saved.status();
      saves.push_back(Seconds(start));
      manifest = *saved;
      std::cerr << absl::StrFormat("  %d MiB, %d PS: save %.2f s, raw write %.2f s\n", mib, num_ps,
                                   saves.back(), raws.back());
    }
    row.save_s = bench::Median(saves);
    row.raw_write_s = bench::Median(raws);
  }  // the saving PS stop here
  std::vector<std::string> paths;
  for (const CheckpointFile& f : manifest.files()) {
    row.file_bytes += f.bytes();
    paths.push_back(absl::StrCat(case_dir, "/ckpt-", manifest.checkpoint_id(), "/",
                                 std::filesystem::path(f.name()).filename().string()));
  }
  row.raw_read_s = RawRead(paths, num_ps);
  for (int target : restore_ps) {
    absl::StatusOr<VariablePlan> new_plan = Plan(vars, target);
    if (!new_plan.ok()) return new_plan.status();
    absl::StatusOr<PsSet> set = StartPs(bin, case_dir, target);
    if (!set.ok()) return set.status();
    for (const std::string& p : paths) DropCache(p);
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = manager.Restore(manifest, *new_plan, set->raw()); !s.ok()) return s;
    row.restore_s.emplace_back(target, Seconds(start));
    std::cerr << absl::StrFormat("  %d MiB, %d PS -> %d PS: restore %.2f s\n", mib, num_ps, target,
                                 row.restore_s.back().second);
  }
  std::filesystem::remove_all(case_dir);
  return row;
}

absl::StatusOr<std::vector<int64_t>> Ints(const std::vector<std::string>& in, const char* flag,
                                          int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (const std::string& s : in) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", s, "\" is not an integer in [", lo, ", ", hi, "]"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

std::string Load() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "unknown";
  return absl::StrFormat("%.2f %.2f %.2f", load[0], load[1], load[2]);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Checkpoint save and restore time per GiB through real ps_server processes, against a "
      "raw fsync'd write and a cold read of the same bytes.\n"
      "  checkpoint_bench --ps_server_bin=.bazel/bin/ps/ps_server [--sizes_mib=256,512,1024] "
      "[--ps=1,2,4] [--restore_ps=1,2,4] [--repeats=2] [--dir=DIR] [--output_json=PATH]");
  absl::ParseCommandLine(argc, argv);
  const std::string bin = absl::GetFlag(FLAGS_ps_server_bin);
  const int64_t var_mib = absl::GetFlag(FLAGS_var_mib);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  auto sizes = Ints(absl::GetFlag(FLAGS_sizes_mib), "sizes_mib", 1, 4096);
  auto ps = Ints(absl::GetFlag(FLAGS_ps), "ps", 1, 16);
  auto restore = Ints(absl::GetFlag(FLAGS_restore_ps), "restore_ps", 1, 16);
  for (const auto* v : {&sizes, &ps, &restore}) {
    if (!v->ok()) {
      std::cerr << "checkpoint_bench: " << v->status().message() << "\n";
      return kExitBadFlags;
    }
  }
  if (var_mib < 1 || var_mib > 256 || repeats < 1 || repeats > 10) {
    std::cerr << "checkpoint_bench: need --var_mib in [1, 256] and --repeats in [1, 10]\n";
    return kExitBadFlags;
  }
  for (int64_t mib : *sizes) {
    if (mib % var_mib != 0) {
      std::cerr << "checkpoint_bench: --sizes_mib " << mib << " is not a multiple of --var_mib "
                << var_mib << "\n";
      return kExitBadFlags;
    }
  }
  std::string dir = absl::GetFlag(FLAGS_dir);
  bool made_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/checkpoint_bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::cerr << "checkpoint_bench: cannot create a directory under /tmp\n";
      return 1;
    }
    dir = tmpl;
    made_dir = true;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "checkpoint_bench: --dir " << dir << ": " << ec.message() << "\n";
    return kExitBadFlags;
  }
  const std::string load_before = Load();
  std::vector<int> restore_ps(restore->begin(), restore->end());
  std::vector<Row> rows;
  for (int64_t mib : *sizes) {
    for (int64_t p : *ps) {
      absl::StatusOr<Row> row = RunCase(bin, dir, mib, static_cast<int>(p), restore_ps, repeats);
      if (!row.ok()) {
        std::cerr << "checkpoint_bench: " << mib << " MiB on " << p << " PS: " << row.status()
                  << "\n";
        if (made_dir) std::filesystem::remove_all(dir, ec);
        return 1;
      }
      rows.push_back(*std::move(row));
    }
  }
  if (made_dir) std::filesystem::remove_all(dir, ec);
  const std::string load_after = Load();

  const std::string date = bench::UtcNow();
  const std::string cpu = bench::CpuModel();
  std::cout << absl::StrFormat(
      "Machine: %u CPUs, %s. Date: %s. Directory: %s. Load before / after: %s / %s.\n"
      "Real ps_server processes on 127.0.0.1; CheckpointManager::Save / Restore over "
      "RemotePsClient; dense float32 variables of %d MiB, SGD (no slots), "
      "FixedShardsPartitioner(P). Save: median of %d; raw write: P threads, 64 MiB "
      "write(2)s + fsync, median of %d. Restore and raw read: once, data files dropped from "
      "the page cache first.\n\n",
      std::thread::hardware_concurrency(), cpu, date, dir, load_before, load_after, var_mib,
      repeats, repeats);
  std::cout << "| GiB | PS | file GiB | save s | save s/GiB | save GiB/s | raw write GiB/s | "
               "save / raw write | raw read GiB/s |";
  for (int t : restore_ps) std::cout << " restore → " << t << " PS s | s/GiB |";
  std::cout << "\n|---|---|---|---|---|---|---|---|---|";
  for (size_t i = 0; i < restore_ps.size(); ++i) std::cout << "---|---|";
  std::cout << "\n";
  std::vector<std::string> json_rows;
  for (const Row& r : rows) {
    const double gib = r.file_bytes / kGiB;
    std::cout << absl::StrFormat("| %.2f | %d | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |",
                                 r.mib / 1024.0, r.ps, gib, r.save_s, r.save_s / gib,
                                 gib / r.save_s, gib / r.raw_write_s, r.save_s / r.raw_write_s,
                                 gib / r.raw_read_s);
    std::vector<std::string> json_restores;
    for (const auto& [target, s] : r.restore_s) {
      std::cout << absl::StrFormat(" %.2f | %.2f |", s, s / gib);
      json_restores.push_back(
          absl::StrFormat("{\"ps\": %d, \"seconds\": %s}", target, bench::JsonNumber(s)));
    }
    std::cout << "\n";
    json_rows.push_back(absl::StrFormat(
        "    {\"variable_mib\": %d, \"ps\": %d, \"file_bytes\": %d, \"save_seconds\": %s, "
        "\"raw_write_seconds\": %s, \"raw_read_seconds\": %s, \"restore\": [%s]}",
        r.mib, r.ps, r.file_bytes, bench::JsonNumber(r.save_s), bench::JsonNumber(r.raw_write_s),
        bench::JsonNumber(r.raw_read_s), absl::StrJoin(json_restores, ", ")));
  }
  const std::string json_path = absl::GetFlag(FLAGS_output_json);
  if (!json_path.empty()) {
    const std::string json = absl::StrCat(
        "{\n  \"benchmark\": \"checkpoint_bench\",\n  \"date\": ", bench::JsonString(date),
        ",\n  \"nproc\": ", std::thread::hardware_concurrency(),
        ",\n  \"cpu_model\": ", bench::JsonString(cpu),
        ",\n  \"load_before\": ", bench::JsonString(load_before),
        ",\n  \"load_after\": ", bench::JsonString(load_after),
        ",\n  \"how\": \"CheckpointManager Save/Restore over RemotePsClient to real ps_server "
        "processes; raw write = P threads write+fsync the same bytes in the same directory; "
        "raw read = one cold pass over the data files\",\n  \"rows\": [\n",
        absl::StrJoin(json_rows, ",\n"), "\n  ]\n}\n");
    if (absl::Status s = WriteFileAtomically(json_path, json).status(); !s.ok()) {
      std::cerr << "checkpoint_bench: --output_json: " << s << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
