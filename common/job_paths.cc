#include "common/job_paths.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/confined_path.h"
#include "common/record_index.h"
#include "common/status_macros.h"

namespace pscluster {

absl::Status CheckDataPath(const std::string& field, const std::string& path,
                           const std::vector<std::string>& data_roots) {
  std::vector<std::string> real_roots;
  for (const std::string& root : data_roots) {
    absl::StatusOr<std::string> real = RealRoot(root, "--data_root");
    if (real.ok()) real_roots.push_back(*std::move(real));
  }
  absl::StatusOr<std::string> real = RealPathOfExistingPrefix(path);
  bool inside = false;
  for (const std::string& root : real_roots) {
    inside = inside || (real.ok() && IsUnderRoot(*real, root) && *real != root);
  }
  if (!inside) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": '", path, "' is not under a data root of this server (--data_root=",
        absl::StrJoin(data_roots, ","), "); put the data there or start the coordinator and ",
        "workers with a --data_root that holds it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ExpandDataFiles(const std::string& field,
                                                         const std::vector<std::string>& patterns,
                                                         const std::vector<std::string>& data_roots) {
  ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataGlobs(patterns));
  for (const std::string& file : files) RETURN_IF_ERROR(CheckDataPath(field, file, data_roots));
  return files;
}

absl::Status CheckDataFiles(const JobSpec& spec, const std::vector<std::string>& data_roots) {
  for (const NamedDataFile& file : NamedDataFiles(spec)) {
    RETURN_IF_ERROR(CheckDataPath(file.field, file.path, data_roots));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointLocation> ResolveCheckpointDir(const std::string& checkpoint_root,
                                                        const std::string& dir) {
  absl::StatusOr<std::string> real_root = RealRoot(checkpoint_root, "--checkpoint_root");
  if (!real_root.ok()) {
    return absl::Status(real_root.status().code(),
                        absl::StrCat("checkpoint.dir '", dir, "' asks for checkpoints, but ",
                                     real_root.status().message()));
  }
  absl::StatusOr<std::string> real = ResolveUnderRoot(checkpoint_root, "--checkpoint_root", dir);
  if (!real.ok()) {
    return absl::Status(real.status().code(),
                        absl::StrCat("checkpoint.dir: ", real.status().message(),
                                     "; a relative checkpoint.dir is taken relative to it"));
  }
  CheckpointLocation location{*real, RelativeToRoot(*real, *real_root)};
  if (!location.name_prefix.empty()) {
    if (absl::Status s = ValidateCheckpointName(location.name_prefix); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint.dir '", dir, "': ", s.message()));
    }
  }
  return location;
}

absl::StatusOr<std::string> ResolveSummaryDir(const std::string& checkpoint_root,
                                              const std::string& logdir) {
  absl::StatusOr<std::string> real_root = RealRoot(checkpoint_root, "--checkpoint_root");
  if (!real_root.ok()) {
    return absl::Status(real_root.status().code(),
                        absl::StrCat("summaries.logdir '", logdir,
                                     "' asks for TensorBoard summaries, which go under the "
                                     "checkpoint root, but ",
                                     real_root.status().message()));
  }
  absl::StatusOr<std::string> real = ResolveUnderRoot(checkpoint_root, "--checkpoint_root", logdir);
  if (!real.ok()) {
    return absl::Status(real.status().code(),
                        absl::StrCat("summaries.logdir: ", real.status().message(),
                                     "; a relative summaries.logdir is taken relative to it"));
  }
  return *std::move(real);
}

}  // namespace pscluster
