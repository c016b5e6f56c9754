// CheckpointManager: a job's checkpoints in one directory.
//
// Save asks every PS to write its data file into <dir>/ckpt-<id>/ (each PS
// writes, fsyncs and renames its own file), naming it by its checkpoint name
// <name_prefix>/ckpt-<id>/ps-<i>.data, which each PS resolves under its own
// --checkpoint_root (common/confined_path.h), then commits the checkpoint by
// writing <dir>/ckpt-<id>/MANIFEST durably (temp file, fsync, rename, fsync of
// the directory) and deletes the oldest checkpoints beyond `keep`. Until the
// MANIFEST exists the checkpoint does not exist: a crash at any point of a
// save leaves the previous checkpoint as the newest complete one, and a save
// that fails removes its directory.
//
// Restore hands every PS the manifest's files (named as Save names them, from
// the files' base names, whatever the manifest recorded) and its part of the
// new layout
// (any number of PS); each PS verifies sizes and checksums before it replaces
// anything. RestoreLatest falls back to older checkpoints when one fails
// verification (DATA_LOSS).
//
// Thread-compatible: one JobRunner drives it.
#ifndef PSCLUSTER_COORDINATOR_CORE_CHECKPOINT_MANAGER_H_
#define PSCLUSTER_COORDINATOR_CORE_CHECKPOINT_MANAGER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "protos/checkpoint.pb.h"

namespace pscluster {

class CheckpointManager {
 public:
  // `dir`: the directory as this process reaches it; `name_prefix`: the same
  // directory relative to the PS's checkpoint root ("" when the root is `dir`
  // itself; CheckpointLocation::name_prefix in common/job_paths.h).
  CheckpointManager(std::string dir, int64_t keep, std::string job_id,
                    std::string name_prefix = "");

  const std::string& dir() const { return dir_; }

  // Takes a checkpoint of every PS; `manifest` carries the data position
  // (epoch, finished splits, global step, history), and gets id, files and
  // time filled in. REQUIRES: no push is in flight. Returns the committed
  // manifest.
  // `expected_variables[p]` is how many variables PS p must save (its part
  // of the layout); a PS that saves fewer restarted and lost them, and the
  // checkpoint is not committed (ABORTED).
  // A save that fails removes the ckpt-<id> directory it created, with
  // whatever the PS wrote into it (so the next save reuses the id); committed
  // checkpoints are never touched. Errors of the file system keep their
  // errno's code (ENOSPC: RESOURCE_EXHAUSTED, ENOTDIR: FAILED_PRECONDITION,
  // ...) and name the directory and the errno text; a PS's error keeps its
  // code and names the PS.
  absl::StatusOr<CheckpointManifest> Save(const std::vector<PsClient*>& ps,
                                          const std::vector<int>& expected_variables,
                                          CheckpointManifest manifest);

  // Committed checkpoints, newest first (manifests that parse; their files
  // are verified by the PS at restore).
  std::vector<CheckpointManifest> List() const;

  // Restores `manifest` into `ps`, laid out as `plan`.
  absl::Status Restore(const CheckpointManifest& manifest, const VariablePlan& plan,
                       const std::vector<PsClient*>& ps) const;

  // Restores the newest checkpoint that verifies and fits the layout, falling
  // back past damaged (DATA_LOSS, NOT_FOUND) and unusable (FAILED_PRECONDITION)
  // ones. NOT_FOUND when there is none; FAILED_PRECONDITION with the newest
  // one's reason when some exist but none fits; other errors (a PS down) as
  // they come.
  absl::StatusOr<CheckpointManifest> RestoreLatest(const VariablePlan& plan,
                                                   const std::vector<PsClient*>& ps) const;

 private:
  std::string CheckpointPath(int64_t id) const;
  // The checkpoint name of data file `file` (a base name) of checkpoint `id`.
  std::string FileName(int64_t id, const std::string& file) const;
  // Save's writes into the new directory `path` of checkpoint `id`.
  absl::StatusOr<CheckpointManifest> SaveInto(const std::string& path, int64_t id,
                                              const std::vector<PsClient*>& ps,
                                              const std::vector<int>& expected_variables,
                                              CheckpointManifest manifest);

  const std::string dir_;
  const int64_t keep_;
  const std::string job_id_;
  const std::string name_prefix_;
};

// Whether an error of CheckpointManager::Save came from the PS tasks
// rather than from the checkpoint storage: a PS that could not be reached
// (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED from its RPC) or that lost its
// variables (ABORTED). Those are healed by PS recovery, not by retrying.
bool IsPsFailure(const absl::Status& save_error);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CHECKPOINT_MANAGER_H_
