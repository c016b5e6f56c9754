#include "coordinator/core/job_admission.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_paths.h"
#include "common/status_macros.h"

namespace pscluster {

int OptimizerSlots(const std::string& optimizer_type) {
  if (optimizer_type == "momentum" || optimizer_type == "adagrad") return 1;
  if (optimizer_type == "adam" || optimizer_type == "ftrl") return 2;
  return 0;
}

std::vector<int64_t> PlannedBytesPerPs(const VariablePlan& plan) {
  std::vector<int64_t> bytes;
  for (const CreateVariablesRequest& ps : plan.per_ps) {
    int64_t total = 0;
    for (const VariableSpecProto& v : ps.variables()) {
      int64_t elements = 1;
      for (int64_t d : v.shape()) elements *= d;
      if (v.kind() == HASH_TABLE) elements *= v.max_rows();  // shape is [dim]
      total += elements * int64_t{4} * (1 + OptimizerSlots(v.optimizer().type()));
    }
    bytes.push_back(total);
  }
  return bytes;
}

absl::Status AdmitJob(const JobSpec& spec, int num_ps, int64_t ps_memory_limit_bytes) {
  if (num_ps < 1) return absl::FailedPreconditionError("the cluster has no PS task");
  ASSIGN_OR_RETURN(VariablePlan plan,
                   PlanVariables(ModelVariables(spec), spec.partitioner, num_ps));
  for (const CreateVariablesRequest& ps : plan.per_ps) {
    for (const VariableSpecProto& v : ps.variables()) {
      if (v.kind() == HASH_TABLE) continue;
      int64_t elements = 1;
      for (int64_t d : v.shape()) elements *= d;
      if (elements > kMaxShardElements) {
        return absl::InvalidArgumentError(absl::StrCat(
            "variable '", v.name(), "' has ", elements, " elements, more than the ",
            kMaxShardElements,
            " one PS accepts in one variable or shard; split it with "
            "variable_partitioner (e.g. {type: max_size, max_shard_bytes: 268435456})"));
      }
    }
  }
  if (ps_memory_limit_bytes <= 0) return absl::OkStatus();
  const std::vector<int64_t> bytes = PlannedBytesPerPs(plan);
  for (size_t p = 0; p < bytes.size(); ++p) {
    if (bytes[p] > ps_memory_limit_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the job needs ", bytes[p], " bytes of parameters and optimizer slots on PS ", p,
          ", over the per-PS memory limit of ", ps_memory_limit_bytes,
          " bytes (coordinator --ps_memory_limit_bytes); use a smaller model, more PS tasks, "
          "or a partitioner that spreads it"));
    }
  }
  return absl::OkStatus();
}

absl::Status AdmitJobPaths(const JobSpec& spec, const std::string& checkpoint_root,
                           const std::vector<std::string>& data_roots) {
  RETURN_IF_ERROR(CheckDataFiles(spec, data_roots));
  if (!spec.checkpoint.dir.empty()) {
    RETURN_IF_ERROR(ResolveCheckpointDir(checkpoint_root, spec.checkpoint.dir).status());
  }
  if (!spec.summaries.logdir.empty()) {
    RETURN_IF_ERROR(ResolveSummaryDir(checkpoint_root, spec.summaries.logdir).status());
  }
  return absl::OkStatus();
}

absl::Status AdmitCheckpointRoots(const std::vector<PsClient*>& ps,
                                  const std::vector<std::string>& ps_addresses,
                                  HealthChecker* health) {
  std::vector<std::string> without;
  for (size_t p = 0; p < ps.size(); ++p) {
    if (health != nullptr && !health->CheckPs(static_cast<int>(p)).ok()) continue;
    StatsResponse stats;
    if (!ps[p]->Stats(StatsRequest(), &stats).ok() || stats.checkpoint_root()) continue;
    without.push_back(p < ps_addresses.size()
                          ? absl::StrCat("PS ", p, " (", ps_addresses[p], ")")
                          : absl::StrCat("PS ", p));
  }
  if (without.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the job asks for checkpoints, but ", absl::StrJoin(without, ", "),
      without.size() == 1 ? " was" : " were",
      " started without --checkpoint_root and cannot write or restore them; start every "
      "ps_server with --checkpoint_root (the coordinator's checkpoint storage), or submit the "
      "job without its checkpoint section"));
}

}  // namespace pscluster
