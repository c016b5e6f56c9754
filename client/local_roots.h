// The roots `psctl local` gives the servers it starts (--checkpoint_root,
// --data_root): those of the local user's own job, which is trusted — the
// confinement of common/job_paths.h then holds without changing the job.
//
// Thread-safe (a free function; it only reads the file system and creates
// the checkpoint root).
#ifndef PSCLUSTER_CLIENT_LOCAL_ROOTS_H_
#define PSCLUSTER_CLIENT_LOCAL_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"

namespace pscluster {

struct LocalRoots {
  // Real path; created if missing.
  std::string checkpoint_root;
  // The real directories of the job's data files (symlinks resolved), each
  // once, in the order of the spec.
  std::vector<std::string> data_roots;
};

// checkpoint_root: for an absolute checkpoint.dir its parent directory; for
// a relative one the working directory (the coordinator takes a relative
// checkpoint.dir relative to its root, so it names the same directory as
// before); for none `<run_dir>/checkpoints` (where the coordinator, with
// --state_dir, keeps each job's checkpoints in `<root>/<job id>`).
// summaries.logdir, if set, must lie under that root (relative: taken from
// it), and needs a checkpoint.dir (the run directory is no place for it).
// INVALID_ARGUMENT when a relative checkpoint.dir leaves the working
// directory ("../ckpt": give an absolute path), and for a summaries.logdir
// outside the root or without checkpoint.dir (naming it); errors creating the root
// with the errno's code.
absl::StatusOr<LocalRoots> LocalRootsFor(const JobSpec& spec, const std::string& run_dir);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_LOCAL_ROOTS_H_
