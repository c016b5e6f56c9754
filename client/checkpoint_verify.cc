#include "client/checkpoint_verify.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/describe.h"
#include "common/checkpoint_file.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/job_log.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "ckpt-";

// The ckpt-<id> directories of `dir`, by id.
std::map<int64_t, fs::path> CheckpointDirs(const std::string& dir) {
  std::map<int64_t, fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t id = 0;
    if (entry.is_directory(ec) && absl::StartsWith(name, kPrefix) &&
        absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1), &id)) {
      out[id] = entry.path();
    }
  }
  return out;
}

// A torn directory: why it is not a checkpoint, and the data files present.
CheckpointDirEntry TornEntry(int64_t id, const fs::path& path) {
  CheckpointDirEntry e;
  e.id = id;
  std::error_code ec;
  e.problem = fs::exists(path / "MANIFEST", ec)
                  ? "MANIFEST does not parse or names another checkpoint"
                  : "no MANIFEST";
  for (const auto& f : fs::directory_iterator(path, ec)) {
    const std::string name = f.path().filename().string();
    if (!f.is_regular_file(ec)) continue;
    if (absl::StartsWith(name, "ps-") && absl::EndsWith(name, ".data")) ++e.files;
    if (name != "MANIFEST") e.bytes += static_cast<int64_t>(f.file_size(ec));
  }
  return e;
}

// Checks every file of a committed checkpoint; the first problem, or "".
// The files are found by their base names in the MANIFEST's directory.
std::string VerifyFiles(const fs::path& checkpoint_dir, const CheckpointManifest& m) {
  for (const CheckpointFile& f : m.files()) {
    const fs::path path = checkpoint_dir / fs::path(f.name()).filename();
    absl::Status s = VerifyCheckpointFile(path.string(), f);
    if (!s.ok()) return std::string(s.message());
  }
  return "";
}

// The spec of `job_id` from the job log (the first JobStarted for it, else
// the log's first JobStarted).
absl::StatusOr<JobSpec> SpecFromLog(const std::string& dir, const std::string& job_id,
                                    std::string* spec_job_id) {
  const std::string path = dir + "/joblog";
  absl::StatusOr<std::vector<JobLogRecord>> log = ReadJobLog(path);
  if (!log.ok()) {
    return absl::NotFoundError(absl::StrCat("cannot read the job log ", path,
                                            " (it holds the job's spec): ", log.status().message()));
  }
  const JobStarted* started = nullptr;
  for (const JobLogRecord& r : *log) {
    if (!r.has_started()) continue;
    if (started == nullptr) started = &r.started();
    if (r.started().job_id() == job_id) {
      started = &r.started();
      break;
    }
  }
  if (started == nullptr) {
    return absl::NotFoundError(absl::StrCat("the job log ", path, " has no JobStarted record"));
  }
  *spec_job_id = started->job_id();
  absl::StatusOr<JobSpec> spec = ParseJobSpec(started->spec_yaml(), path);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job's spec in ", path, " does not parse: ", spec.status().message()));
  }
  return spec;
}

// Restores the newest checkpoint that verifies into `num_ps` in-process
// stores, filling restored_id, stores and the entries' `restored`.
absl::Status Restore(const JobSpec& spec, CheckpointVerifyReport* report) {
  absl::StatusOr<VariablePlan> plan =
      PlanVariables(ModelVariables(spec), spec.partitioner, report->num_ps);
  if (!plan.ok()) return plan.status();
  std::vector<std::unique_ptr<VariableStore>> stores;
  std::vector<std::unique_ptr<InProcessPsClient>> clients;
  std::vector<PsClient*> ps;
  for (int i = 0; i < report->num_ps; ++i) {
    // The directory is the stores' checkpoint root: the manager names the
    // files "ckpt-<id>/ps-<i>.data" under it.
    VariableStore::Options store_options;
    store_options.checkpoint_root = report->dir;
    stores.push_back(std::make_unique<VariableStore>(store_options));
    clients.push_back(std::make_unique<InProcessPsClient>(stores.back().get()));
    ps.push_back(clients.back().get());
  }
  // keep only matters to Save, which this never calls.
  CheckpointManager manager(report->dir, /*keep=*/1, report->job_id);
  absl::StatusOr<CheckpointManifest> m = manager.RestoreLatest(*plan, ps);
  if (!m.ok()) return m.status();
  report->restored = true;
  report->restored_id = m->checkpoint_id();
  for (PsClient* p : ps) {
    StatsResponse& stats = report->stores.emplace_back();
    if (absl::Status s = p->Stats(StatsRequest(), &stats); !s.ok()) return s;
  }
  for (CheckpointDirEntry& e : report->checkpoints) {
    e.restored = e.id == report->restored_id;
    // A newer checkpoint whose files verify but that RestoreLatest passed
    // over: it does not fit the layout (a variable or rows missing, e.g. saved
    // from a PS that had restarted empty) or holds a malformed record.
    if (e.committed && e.id > report->restored_id && e.problem.empty()) {
      e.problem = "the restore passed over it (its contents do not restore)";
    }
  }
  return absl::OkStatus();
}

std::string Position(const CheckpointManifest& m) {
  return absl::StrFormat("epoch %d (+%d closures) step %d", m.epoch() + 1, m.finished_splits_size(),
                         m.global_step());
}

struct StoreTotals {
  int64_t variables = 0, rows = 0, parameter_bytes = 0, slot_bytes = 0;
};

StoreTotals Totals(const StatsResponse& stats) {
  StoreTotals t;
  for (const VariableStats& v : stats.variables()) {
    ++t.variables;
    t.rows += v.rows();
    t.parameter_bytes += v.parameter_bytes();
    t.slot_bytes += v.slot_bytes();
  }
  return t;
}

}  // namespace

absl::StatusOr<JobSpec> CheckpointJobSpec(const std::string& dir, const std::string& job_id,
                                          std::string* spec_job_id) {
  return SpecFromLog(dir, job_id, spec_job_id);
}

absl::StatusOr<CheckpointVerifyReport> VerifyCheckpointDir(const CheckpointVerifyOptions& options) {
  if (options.num_ps < 0) return absl::InvalidArgumentError("--ps must be at least 1");
  std::error_code ec;
  if (!fs::is_directory(options.dir, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint directory ", options.dir));
  }
  CheckpointVerifyReport report;
  report.dir = options.dir;
  // Committed: what the coordinator's own listing accepts.
  std::map<int64_t, CheckpointManifest> committed;
  for (CheckpointManifest& m : CheckpointManager(options.dir, 1, "").List()) {
    committed[m.checkpoint_id()] = std::move(m);
  }
  const std::map<int64_t, fs::path> dirs = CheckpointDirs(options.dir);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    auto c = committed.find(it->first);
    if (c == committed.end()) {
      report.checkpoints.push_back(TornEntry(it->first, it->second));
      continue;
    }
    CheckpointDirEntry& e = report.checkpoints.emplace_back();
    e.id = it->first;
    e.committed = true;
    e.manifest = c->second;
    e.files = e.manifest.files_size();
    for (const CheckpointFile& f : e.manifest.files()) e.bytes += f.bytes();
    e.problem = VerifyFiles(it->second, e.manifest);
    e.files_verified = e.problem.empty();
  }
  if (committed.empty()) {
    report.error = absl::StrCat("no committed checkpoint in ", options.dir);
    return report;
  }
  const CheckpointManifest& newest = committed.rbegin()->second;
  report.num_ps = options.num_ps > 0 ? options.num_ps : newest.num_ps();
  absl::StatusOr<JobSpec> spec = SpecFromLog(options.dir, newest.job_id(), &report.job_id);
  if (!spec.ok()) {
    report.error = std::string(spec.status().message());
    return report;
  }
  if (absl::Status s = Restore(*spec, &report); !s.ok()) {
    report.restored = false;
    report.restored_id = -1;
    report.stores.clear();
    if (absl::IsNotFound(s)) {
      report.error = absl::StrCat(
          "no checkpoint restores: every committed checkpoint fails verification (", s.message(),
          ")");
    } else {
      // RestoreLatest stops at the first checkpoint that fails other than by
      // DATA_LOSS or NOT_FOUND: the newest one whose files verify.
      report.error = std::string(s.message());
      for (CheckpointDirEntry& e : report.checkpoints) {
        if (!e.committed || !e.problem.empty()) continue;
        e.problem = std::string(s.message());
        break;
      }
    }
  }
  return report;
}

std::string FormatCheckpointVerify(const CheckpointVerifyReport& r) {
  std::string out = absl::StrCat("checkpoints in ", r.dir, " (newest first):\n");
  if (r.checkpoints.empty()) out += "  none\n";
  for (const CheckpointDirEntry& e : r.checkpoints) {
    const std::string name = absl::StrCat(kPrefix, e.id);
    if (!e.committed) {
      absl::StrAppendFormat(&out, "  %-10s torn (never loaded): %s; %d data files, %s\n", name,
                            e.problem, e.files, FormatBytes(e.bytes));
      continue;
    }
    std::string state = e.restored ? "restored" : "verified";
    if (!e.files_verified) {
      state = absl::StrCat("FAILS verification: ", e.problem);
    } else if (!e.problem.empty()) {
      state = absl::StrCat("NOT RESTORABLE (its files verify): ", e.problem);
    }
    absl::StrAppendFormat(&out, "  %-10s %-34s %d PS, %d files, %-10s %s\n", name,
                          Position(e.manifest), e.manifest.num_ps(), e.files, FormatBytes(e.bytes),
                          state);
  }
  if (!r.restored) {
    absl::StrAppend(&out, "NOT RESTORED: ", r.error, "\n");
    return out;
  }
  for (const CheckpointDirEntry& e : r.checkpoints) {
    if (!e.restored) continue;
    absl::StrAppendFormat(&out, "restored checkpoint %d of job %s (%s) into %d PS:\n", e.id,
                          r.job_id, Position(e.manifest), r.num_ps);
  }
  for (size_t i = 0; i < r.stores.size(); ++i) {
    const StoreTotals t = Totals(r.stores[i]);
    absl::StrAppendFormat(&out, "  ps-%d: %d variables, %d rows, %s parameters, %s slots\n", i,
                          t.variables, t.rows, FormatBytes(t.parameter_bytes),
                          FormatBytes(t.slot_bytes));
  }
  return out;
}

nlohmann::json CheckpointVerifyJson(const CheckpointVerifyReport& r) {
  nlohmann::json out = {{"dir", r.dir},       {"restored", r.restored},
                        {"restored_id", r.restored_id}, {"num_ps", r.num_ps},
                        {"job_id", r.job_id}, {"checkpoints", nlohmann::json::array()},
                        {"stores", nlohmann::json::array()}};
  if (!r.error.empty()) out["error"] = r.error;
  for (const CheckpointDirEntry& e : r.checkpoints) {
    nlohmann::json c = {{"id", e.id},
                        {"state", e.committed ? "committed" : "torn"},
                        {"files", e.files},
                        {"bytes", e.bytes},
                        {"restored", e.restored}};
    if (e.committed) {
      c["epoch"] = e.manifest.epoch();
      c["global_step"] = e.manifest.global_step();
      c["num_ps"] = e.manifest.num_ps();
      c["job_id"] = e.manifest.job_id();
      c["files_verified"] = e.files_verified;
      c["verified"] = e.problem.empty();
    }
    if (!e.problem.empty()) c["problem"] = e.problem;
    out["checkpoints"].push_back(std::move(c));
  }
  for (size_t i = 0; i < r.stores.size(); ++i) {
    const StoreTotals t = Totals(r.stores[i]);
    out["stores"].push_back({{"ps", i},
                             {"variables", t.variables},
                             {"rows", t.rows},
                             {"parameter_bytes", t.parameter_bytes},
                             {"slot_bytes", t.slot_bytes}});
  }
  return out;
}

}  // namespace pscluster
