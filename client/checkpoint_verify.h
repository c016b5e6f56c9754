// `psctl checkpoint verify DIR`: what a job's checkpoint directory holds, and
// proof that its newest good checkpoint restores.
//
// Lists every ckpt-<id> directory: committed checkpoints (a MANIFEST that
// parses and names its own id) with their data position, files and bytes,
// each file checked against the manifest's size and XXH3-64; and torn ones
// (no valid MANIFEST), which recovery never loads. Then takes the job's spec
// from DIR/joblog (the JobStarted of the newest checkpoint's job, else the
// first), lays its variables out over N PS with PlanVariables, and restores
// into N in-process VariableStores through CheckpointManager::RestoreLatest —
// the coordinator's own recovery path, so it picks the checkpoint a restarted
// job would, falling back past damaged ones. Each store verifies every file
// before it loads anything; the report ends with what each store holds.
//
// Runs entirely in this process (no gRPC); thread-compatible.
#ifndef PSCLUSTER_CLIENT_CHECKPOINT_VERIFY_H_
#define PSCLUSTER_CLIENT_CHECKPOINT_VERIFY_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "protos/checkpoint.pb.h"
#include "protos/ps.pb.h"

namespace pscluster {

struct CheckpointVerifyOptions {
  // The job's checkpoint directory (checkpoint.dir of its spec).
  std::string dir;
  // PS tasks to restore into; 0: the num_ps of the newest committed
  // checkpoint (the layout that wrote it).
  int num_ps = 0;
};

// One ckpt-<id> directory.
struct CheckpointDirEntry {
  int64_t id = 0;
  // A MANIFEST that parses and names this id. Otherwise the directory is
  // torn: a save that never committed.
  bool committed = false;
  CheckpointManifest manifest;  // committed only
  int files = 0;                // committed: the manifest's; torn: ps-*.data present
  int64_t bytes = 0;            // committed: the manifest's sizes; torn: on disk
  // Committed: every data file exists with the manifest's size and XXH3-64.
  bool files_verified = false;
  // Torn: why ("no MANIFEST", ...). Committed: why it fails verification
  // (a file missing, or its size or checksum differs) or, its files being
  // whole, why it does not restore; empty if it verifies.
  std::string problem;
  bool restored = false;  // the checkpoint RestoreLatest loaded
};

struct CheckpointVerifyReport {
  std::string dir;
  std::vector<CheckpointDirEntry> checkpoints;  // newest (highest id) first
  std::string job_id;                           // of the spec used; empty without one
  int num_ps = 0;                               // PS restored into
  bool restored = false;
  int64_t restored_id = -1;
  // Why nothing restored (no committed checkpoint, no job log, every
  // checkpoint damaged, the spec does not match, ...); empty when restored.
  std::string error;
  // What each store holds after the restore, one per PS (restored only).
  std::vector<StatsResponse> stores;
};

// Lists and restores as described above. A report whose `restored` is false
// says why in `error`. NOT_FOUND if options.dir does not exist or is not a
// directory; INVALID_ARGUMENT for num_ps < 0.
absl::StatusOr<CheckpointVerifyReport> VerifyCheckpointDir(const CheckpointVerifyOptions& options);

// The job spec a checkpoint directory's job log (DIR/joblog) records: that
// of the first JobStarted for `job_id`, else of the log's first JobStarted;
// sets *spec_job_id to the job it came from. NOT_FOUND without a readable
// log or a JobStarted record; INVALID_ARGUMENT if the recorded spec does not
// parse. The reader `checkpoint verify` and `export` share.
absl::StatusOr<JobSpec> CheckpointJobSpec(const std::string& dir, const std::string& job_id,
                                          std::string* spec_job_id);

// The report as text: one line per checkpoint directory, then the restore.
std::string FormatCheckpointVerify(const CheckpointVerifyReport& report);

// {"dir", "checkpoints": [{"id", "state": "committed"|"torn", "epoch",
//  "global_step", "num_ps", "job_id", "files", "bytes", "files_verified",
//  "verified" (files verified and it restores, as far as known), "restored",
//  "problem"}], "restored": bool, "restored_id", "num_ps", "job_id",
//  "error", "stores": [{"ps", "variables", "rows", "parameter_bytes",
//  "slot_bytes"}]}. Committed-only fields are absent for torn directories;
//  "problem" and "error" only when non-empty.
nlohmann::json CheckpointVerifyJson(const CheckpointVerifyReport& report);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_CHECKPOINT_VERIFY_H_
