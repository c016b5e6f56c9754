// Where a job may read and write: its data files confined to the data roots
// and its checkpoint directory (and TensorBoard logdir) to the checkpoint root, the policy of the
// coordinator (checked when a job is submitted) and of every worker (checked
// again at SetupJob). Built on common/confined_path.h.
//
// Thread-safe (free functions; they only read the file system).
#ifndef PSCLUSTER_COMMON_JOB_PATHS_H_
#define PSCLUSTER_COMMON_JOB_PATHS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"

namespace pscluster {

// Where Debian's dataset packages put their files (dataset-fashion-mnist:
// /usr/share/datasets/fashion-mnist): the data root of a coordinator or
// worker started without --data_root.
inline constexpr char kDefaultDataRoot[] = "/usr/share/datasets";

// OK when every data file of the job (NamedDataFiles: idx images/labels, csv
// paths) lies under one of `data_roots` once the symlinks of its existing
// components are resolved; a relative path is taken from this process's
// working directory (where a worker reads it from). Roots that do not exist
// contain nothing.
// INVALID_ARGUMENT naming the field, the path, the roots and --data_root.
// The files are never opened here.
absl::Status CheckDataFiles(const JobSpec& spec, const std::vector<std::string>& data_roots);
// The same check for one file `path`, named `field` in the error: a
// streaming closure's file (DataSplit.path), expanded by the coordinator
// from the spec's patterns.
absl::Status CheckDataPath(const std::string& field, const std::string& path,
                           const std::vector<std::string>& data_roots);
// The files a streaming source's path patterns match (ExpandDataGlobs,
// common/record_index.h), each checked with CheckDataPath: a pattern that
// passed CheckDataFiles can still match files outside every root (`..`
// after a wildcard, a symlink), and the coordinator opens each to index it.
// ExpandDataGlobs' errors, or CheckDataPath's for the first file outside.
absl::StatusOr<std::vector<std::string>> ExpandDataFiles(const std::string& field,
                                                         const std::vector<std::string>& patterns,
                                                         const std::vector<std::string>& data_roots);

// A job's checkpoint directory confined to the checkpoint root.
struct CheckpointLocation {
  // The real path of the directory, for this process's own files (the
  // manifests, the job log).
  std::string dir;
  // The directory relative to the root ("" for the root itself): the prefix
  // of the checkpoint names sent to the PS, which resolve them under their
  // own --checkpoint_root (the same storage, possibly mounted elsewhere).
  std::string name_prefix;
};

// Confines `dir` (checkpoint.dir: relative to the root, or absolute) to
// `checkpoint_root`.
// FAILED_PRECONDITION when `checkpoint_root` is empty or missing (naming
// --checkpoint_root); INVALID_ARGUMENT naming checkpoint.dir, the path, the
// root and the flag when it resolves outside, or when its part under the root
// is not a valid checkpoint name (ValidateCheckpointName).
absl::StatusOr<CheckpointLocation> ResolveCheckpointDir(const std::string& checkpoint_root,
                                                        const std::string& dir);

// A job's summaries.logdir (TensorBoard event files) confined to
// `checkpoint_root` as checkpoint.dir is: relative to the root, or absolute
// under it. Returns its real path (the directory need not exist yet).
// FAILED_PRECONDITION when `checkpoint_root` is empty or missing (naming
// summaries.logdir and --checkpoint_root); INVALID_ARGUMENT naming
// summaries.logdir, the path, the root and the flag when it resolves
// outside.
absl::StatusOr<std::string> ResolveSummaryDir(const std::string& checkpoint_root,
                                              const std::string& logdir);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_JOB_PATHS_H_
