// Admission: whether a job fits the cluster, checked when it is submitted,
// before it is queued. ParseJobSpec has already bounded every size in the
// spec (JobLimits in common/job_spec.h); this adds what depends on the
// cluster: the job's variables laid out over its PS tasks, and the
// parameter plus optimizer-slot bytes each PS would hold, against the
// per-PS memory limit; the paths it reads and writes; and, for a job that
// checkpoints, whether its PS can.
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_ADMISSION_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_ADMISSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "coordinator/core/health_checker.h"

namespace pscluster {

// Largest variable or shard a PS accepts, in elements (VariableStore's
// default max_variable_elements: 2^28 float32 = 1 GiB, one gRPC message).
inline constexpr int64_t kMaxShardElements = int64_t{1} << 28;

// Optimizer slot arrays per parameter: sgd 0, momentum 1, adagrad 1, adam 2,
// ftrl 2 (ps/core/optimizer.h).
int OptimizerSlots(const std::string& optimizer_type);

// Bytes of parameters plus slots that each PS of `plan` holds: dense
// variables at their size, hash tables at max_rows (an unbounded table
// counts as empty: it grows with the data, and the PS enforces no bound).
std::vector<int64_t> PlannedBytesPerPs(const VariablePlan& plan);

// OK when the job fits a cluster of `num_ps` PS tasks.
// INVALID_ARGUMENT: the partitioner cannot lay it out, or a shard has more
//   than kMaxShardElements elements (naming it and suggesting a partitioner).
// RESOURCE_EXHAUSTED: a PS would hold more than `ps_memory_limit_bytes`
//   (0: no limit), naming the PS, its bytes and the limit.
absl::Status AdmitJob(const JobSpec& spec, int num_ps, int64_t ps_memory_limit_bytes);

// OK when the job reads and writes only where this coordinator allows
// (common/job_paths.h): every data file under one of `data_roots`
// (--data_root), and checkpoint.dir and summaries.logdir, if set, under
// `checkpoint_root` (--checkpoint_root; relative to it when relative).
// INVALID_ARGUMENT naming the field, the path and the flag when one lies
//   outside (nothing is opened: the message holds no file's contents).
// FAILED_PRECONDITION naming --checkpoint_root when the job sets
//   checkpoint.dir or summaries.logdir and the coordinator has no checkpoint
//   root.
absl::Status AdmitJobPaths(const JobSpec& spec, const std::string& checkpoint_root,
                           const std::vector<std::string>& data_roots);

// For a job that asks for checkpoints: OK when every PS that answers can
// write them. Asks each PS of `ps` for its Stats (no job: needs no proof)
// unless `health` (may be null) says it is down now; a PS that does not
// answer is skipped (the job waits for its cluster at its start, as any).
// `ps_addresses[i]` names PS i (missing: "PS i" alone).
// FAILED_PRECONDITION naming every PS (index and address) that answers
//   without a --checkpoint_root (it refuses every Save and Restore).
absl::Status AdmitCheckpointRoots(const std::vector<PsClient*>& ps,
                                  const std::vector<std::string>& ps_addresses,
                                  HealthChecker* health);

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_ADMISSION_H_
