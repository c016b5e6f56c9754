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
  if (!dir.empty()) {
    absl::StatusOr<CheckpointLocation> location = ResolveCheckpointDir(roots.checkpoint_root, dir);
    if (!location.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          location.status().message(),
          dir[0] == '/' ? ""
                        : " (psctl local: give a checkpoint.dir outside it as an absolute path)"));
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
