#include "client/local_roots.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/confined_path.h"
#include "common/job_paths.h"
#include "common/status_macros.h"

namespace pscluster {

absl::StatusOr<LocalRoots> LocalRootsFor(const JobSpec& spec, const std::string& run_dir) {
  namespace fs = std::filesystem;
  LocalRoots roots;
  std::string root;
  const std::string& dir = spec.checkpoint.dir;
  std::error_code ec;
  if (dir.empty()) {
    root = run_dir + "/checkpoints";
  } else if (dir[0] == '/') {
    root = fs::path(dir).lexically_normal().parent_path().string();
  } else {
    root = fs::current_path(ec).string();
    if (ec)
      return absl::InternalError(absl::StrCat("cannot get the working directory: ", ec.message()));
  }
  fs::create_directories(root, ec);
  if (ec) {
    return absl::Status(
        absl::ErrnoToStatusCode(ec.value()),
        absl::StrCat("cannot create the checkpoint root ", root, ": ", ec.message()));
  }
  ASSIGN_OR_RETURN(roots.checkpoint_root, RealRoot(root, "checkpoint root"));
  if (!spec.checkpoint.dir.empty()) {
    absl::StatusOr<CheckpointLocation> location = ResolveCheckpointDir(roots.checkpoint_root, dir);
    if (!location.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          location.status().message(),
          dir[0] == '/' ? ""
                        : " (psctl local: give a checkpoint.dir outside it as an absolute path)"));
    }
  }
  // The TensorBoard logdir lies under the same root. Without checkpoint.dir
  // that root is psctl's run directory (temporary, and where the coordinator
  // keeps the job's default checkpoints), so a logdir asks for a
  // checkpoint.dir.
  if (const std::string& logdir = spec.summaries.logdir; !logdir.empty()) {
    if (dir.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "summaries.logdir '", logdir, "' needs a checkpoint.dir under psctl local: the logdir "
          "lies under the checkpoint root (checkpoint.dir's parent directory, or the working "
          "directory for a relative checkpoint.dir); add one"));
    }
    absl::StatusOr<std::string> resolved = ResolveSummaryDir(roots.checkpoint_root, logdir);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          resolved.status().message(),
          " (psctl local: put summaries.logdir beside checkpoint.dir, or under the working "
          "directory when checkpoint.dir is relative; a relative logdir is taken from there)"));
    }
  }
  for (const NamedDataFile& file : NamedDataFiles(spec)) {
    ASSIGN_OR_RETURN(const std::string real, RealPathOfExistingPrefix(file.path));
    const std::string parent = fs::path(real).parent_path().string();
    if (std::find(roots.data_roots.begin(), roots.data_roots.end(), parent) ==
        roots.data_roots.end()) {
      roots.data_roots.push_back(parent);
    }
  }
  return roots;
}

}  // namespace pscluster
