#include "coordinator/core/checkpoint_manager.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "coordinator/core/job_log.h"

namespace pscluster {
namespace {

constexpr char kPrefix[] = "ckpt-";
// An old checkpoint being deleted (renamed first: see Save).
constexpr char kDeleting[] = ".deleting-ckpt-";
constexpr int kFormatVersion = 1;
// Marks Save errors of the PS tasks (IsPsFailure).
constexpr char kPsFailurePayload[] = "pscluster/checkpoint/ps-failure";

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no manifest ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  CheckpointManifest m;
  if (!m.ParseFromString(buf.str()) || m.format_version() != kFormatVersion) {
    return absl::DataLossError(absl::StrCat("manifest ", path, " is unreadable"));
  }
  return m;
}

// A failed file system call on the checkpoint directory: the code of its
// errno (ENOSPC: RESOURCE_EXHAUSTED, ENOTDIR: FAILED_PRECONDITION, ...),
// and a message naming the directory and the errno text.
absl::Status FileSystemError(const std::error_code& ec, const std::string& what,
                             const std::string& dir) {
  const absl::StatusCode code = ec.category() == std::generic_category() ||
                                        ec.category() == std::system_category()
                                    ? absl::ErrnoToStatusCode(ec.value())
                                    : absl::StatusCode::kUnknown;
  return absl::Status(code, absl::StrCat("cannot ", what, " ", dir, ": ", ec.message()));
}

}  // namespace

CheckpointManager::CheckpointManager(std::string dir, int64_t keep, std::string job_id,
                                     std::string name_prefix)
    : dir_(std::move(dir)),
      keep_(keep),
      job_id_(std::move(job_id)),
      name_prefix_(std::move(name_prefix)) {}

std::string CheckpointManager::FileName(int64_t id, const std::string& file) const {
  return absl::StrCat(name_prefix_, name_prefix_.empty() ? "" : "/", kPrefix, id, "/", file);
}

std::string CheckpointManager::CheckpointPath(int64_t id) const {
  return absl::StrCat(dir_, "/", kPrefix, id);
}

std::vector<CheckpointManifest> CheckpointManager::List() const {
  std::vector<CheckpointManifest> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t id = 0;
    if (!absl::StartsWith(name, kPrefix) || !absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1), &id)) {
      continue;
    }
    absl::StatusOr<CheckpointManifest> m = ReadManifest(entry.path().string() + "/MANIFEST");
    if (m.ok() && m->checkpoint_id() == id) out.push_back(*std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.checkpoint_id() > b.checkpoint_id();
  });
  return out;
}

absl::StatusOr<CheckpointManifest> CheckpointManager::Save(
    const std::vector<PsClient*>& ps, const std::vector<int>& expected_variables,
    CheckpointManifest manifest) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return FileSystemError(ec, "create the checkpoint directory", dir_);
  // The next id is past every directory, committed or torn (a torn one of an
  // earlier coordinator is removed only after the next commit).
  int64_t next = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t id = 0;
    if (absl::StartsWith(name, kPrefix) && absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1), &id)) {
      next = std::max(next, id + 1);
    }
  }
  if (ec) return FileSystemError(ec, "list the checkpoint directory", dir_);
  const std::string path = CheckpointPath(next);
  if (!std::filesystem::create_directory(path, ec) || ec) {
    if (!ec) ec = std::make_error_code(std::errc::file_exists);
    return FileSystemError(ec, absl::StrCat("create checkpoint ", next, " in"), dir_);
  }
  absl::StatusOr<CheckpointManifest> saved =
      SaveInto(path, next, ps, expected_variables, std::move(manifest));
  if (!saved.ok()) {
    // Torn: nothing refers to it; it goes with whatever the PS wrote into
    // it, so that failed saves neither fill the disk nor use up ids.
    // A directory that cannot be removed (the file system forbids it) stays
    // torn: never loaded, and removed after the next commit.
    std::filesystem::remove_all(path, ec);
    if (ec) spdlog::warn("cannot remove the failed checkpoint {}: {}", path, ec.message());
    return saved.status();
  }
  // Keep the newest `keep` committed checkpoints; drop older and torn ones.
  std::vector<CheckpointManifest> all = List();
  std::vector<int64_t> keep_ids;
  for (size_t i = 0; i < all.size() && static_cast<int64_t>(i) < keep_; ++i) {
    keep_ids.push_back(all[i].checkpoint_id());
  }
  std::vector<std::filesystem::path> doomed;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t id = 0;
    if (absl::StartsWith(name, kDeleting)) {
      doomed.push_back(entry.path());  // a delete an earlier crash cut short
      continue;
    }
    if (!absl::StartsWith(name, kPrefix) || !absl::SimpleAtoi(name.substr(sizeof(kPrefix) - 1), &id)) {
      continue;
    }
    if (std::find(keep_ids.begin(), keep_ids.end(), id) == keep_ids.end()) doomed.push_back(entry.path());
  }
  for (const std::filesystem::path& path : doomed) {
    // Renamed out of the checkpoints' names first, atomically: a checkpoint
    // is either still whole and committed (the rename failed, e.g. the
    // directory became read-only or immutable: it goes after a later commit)
    // or no checkpoint at all (a crash mid-delete leaves a ".deleting-"
    // directory, removed after the next commit), never a committed one with
    // missing files nor a torn one.
    std::filesystem::path target = path;
    const std::string name = path.filename().string();
    if (!absl::StartsWith(name, kDeleting)) {
      target = path.parent_path() / (std::string(kDeleting) + name);
      std::filesystem::rename(path, target, ec);
      if (ec) {
        spdlog::warn("cannot remove the old checkpoint {}: {}", path.string(), ec.message());
        continue;
      }
    }
    std::filesystem::remove_all(target, ec);
  }
  return saved;
}

absl::StatusOr<CheckpointManifest> CheckpointManager::SaveInto(
    const std::string& path, int64_t next, const std::vector<PsClient*>& ps,
    const std::vector<int>& expected_variables, CheckpointManifest manifest) {
  // Every PS writes its file at once.
  std::vector<absl::Status> status(ps.size());
  std::vector<SaveResponse> saved(ps.size());
  std::vector<std::thread> threads;
  for (size_t p = 0; p < ps.size(); ++p) {
    threads.emplace_back([&, p] {
      SaveRequest request;
      request.set_name(FileName(next, absl::StrCat("ps-", p, ".data")));
      request.set_ps_index(static_cast<int>(p));
      request.set_job(job_id_);
      status[p] = ps[p]->Save(request, &saved[p]);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t p = 0; p < ps.size(); ++p) {
    if (absl::IsNotFound(status[p])) {
      // The PS holds nothing of the job (it restarted): it writes no file.
      absl::Status error = absl::AbortedError(absl::StrCat(
          "checkpoint ", next, ": PS ", p, " holds nothing of the job (", status[p].message(),
          "): it restarted and lost it"));
      error.SetPayload(kPsFailurePayload, absl::Cord());
      return error;
    }
    if (!status[p].ok()) {
      absl::Status error(status[p].code(),
                         absl::StrCat("checkpoint ", next, ": PS ", p, ": ", status[p].message()));
      if (absl::IsUnavailable(error) || absl::IsDeadlineExceeded(error) || absl::IsCancelled(error)) {
        error.SetPayload(kPsFailurePayload, absl::Cord());
      }
      return error;
    }
    if (p < expected_variables.size() && saved[p].variables() < expected_variables[p]) {
      absl::Status error = absl::AbortedError(absl::StrCat(
          "checkpoint ", next, ": PS ", p, " saved ", saved[p].variables(), " variables of ",
          expected_variables[p], ": it restarted and lost them"));
      error.SetPayload(kPsFailurePayload, absl::Cord());
      return error;
    }
  }
  manifest.set_format_version(kFormatVersion);
  manifest.set_job_id(job_id_);
  manifest.set_checkpoint_id(next);
  manifest.set_num_ps(static_cast<int>(ps.size()));
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  manifest.clear_files();
  for (const SaveResponse& s : saved) {
    CheckpointFile* f = manifest.add_files();
    f->set_name(s.name());
    f->set_bytes(s.bytes());
    f->set_checksum(s.checksum());
  }
  // The commit point.
  if (absl::Status s = WriteFileDurably(path + "/MANIFEST", manifest.SerializeAsString()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("checkpoint ", next, ": ", s.message()));
  }
  return manifest;
}

absl::Status CheckpointManager::Restore(const CheckpointManifest& manifest, const VariablePlan& plan,
                                        const std::vector<PsClient*>& ps) const {
  std::vector<absl::Status> status(ps.size());
  std::vector<std::thread> threads;
  for (size_t p = 0; p < ps.size(); ++p) {
    threads.emplace_back([&, p] {
      RestoreRequest request;
      *request.mutable_files() = manifest.files();
      for (CheckpointFile& f : *request.mutable_files()) {
        // Manifests written before checkpoint names hold absolute paths.
        f.set_name(FileName(manifest.checkpoint_id(),
                            std::filesystem::path(f.name()).filename().string()));
      }
      *request.mutable_variables() = plan.per_ps[p];
      request.set_num_ps(static_cast<int>(ps.size()));
      request.set_ps_index(static_cast<int>(p));
      request.set_job(job_id_);
      RestoreResponse response;
      status[p] = ps[p]->Restore(request, &response);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t p = 0; p < ps.size(); ++p) {
    if (!status[p].ok()) {
      return absl::Status(status[p].code(), absl::StrCat("restoring checkpoint ", manifest.checkpoint_id(),
                                                         " on PS ", p, ": ", status[p].message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManifest> CheckpointManager::RestoreLatest(
    const VariablePlan& plan, const std::vector<PsClient*>& ps) const {
  absl::Status unusable;
  for (const CheckpointManifest& m : List()) {
    absl::Status s = Restore(m, plan, ps);
    if (s.ok()) return m;
    if (absl::IsFailedPrecondition(s)) {
      if (unusable.ok()) unusable = s;  // the newest one's reason
      continue;
    }
    if (!absl::IsDataLoss(s) && !absl::IsNotFound(s)) return s;
    // A damaged checkpoint: try the one before it.
  }
  if (!unusable.ok()) return unusable;
  return absl::NotFoundError(absl::StrCat("no complete checkpoint in ", dir_));
}

bool IsPsFailure(const absl::Status& save_error) {
  return save_error.GetPayload(kPsFailurePayload).has_value();
}

}  // namespace pscluster
