#include "client/checkpoint_params.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "client/checkpoint_verify.h"
#include "common/model_variables.h"
#include "coordinator/core/checkpoint_manager.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "worker/core/param_router.h"

namespace pscluster {

absl::StatusOr<CheckpointParams> LoadCheckpointParams(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint directory ", dir));
  }
  std::vector<CheckpointManifest> committed = CheckpointManager(dir, 1, "").List();
  if (committed.empty()) {
    return absl::NotFoundError(absl::StrCat("no committed checkpoint in ", dir));
  }
  // List() is newest first: the newest names the job and its PS count.
  const CheckpointManifest& newest = committed.front();
  CheckpointParams out;
  absl::StatusOr<JobSpec> spec = CheckpointJobSpec(dir, newest.job_id(), &out.job_id);
  if (!spec.ok()) return spec.status();
  out.spec = *std::move(spec);
  out.variables = ModelVariables(out.spec);
  const int num_ps = std::max(newest.num_ps(), 1);
  absl::StatusOr<VariablePlan> plan = PlanVariables(out.variables, out.spec.partitioner, num_ps);
  if (!plan.ok()) return plan.status();

  std::vector<std::unique_ptr<VariableStore>> stores;
  std::vector<std::unique_ptr<InProcessPsClient>> clients;
  std::vector<PsClient*> ps;
  for (int i = 0; i < num_ps; ++i) {
    VariableStore::Options store_options;
    store_options.checkpoint_root = dir;
    stores.push_back(std::make_unique<VariableStore>(store_options));
    clients.push_back(std::make_unique<InProcessPsClient>(stores.back().get()));
    ps.push_back(clients.back().get());
  }
  CheckpointManager manager(dir, /*keep=*/1, out.job_id);
  absl::StatusOr<CheckpointManifest> restored = manager.RestoreLatest(*plan, ps);
  if (!restored.ok()) return restored.status();
  out.checkpoint_id = restored->checkpoint_id();

  // One pull of every whole-read variable, as a worker's step makes it.
  absl::StatusOr<std::unique_ptr<ParamRouter>> router =
      ParamRouter::Create(out.variables, plan->placement, num_ps);
  if (!router.ok()) return router.status();
  RoutedStep step;
  const std::vector<std::vector<uint64_t>> no_ids((*router)->num_tables());
  if (absl::Status s = (*router)->PlanStep(/*with_dense=*/true, no_ids, &step); !s.ok()) return s;
  std::vector<PullResponse> responses(num_ps);
  for (int i = 0; i < num_ps; ++i) {
    if (!HasWork(step.pull[i])) continue;
    if (absl::Status s = ps[i]->Pull(step.pull[i], &responses[i]); !s.ok()) return s;
  }
  std::vector<Tensor> rows;
  out.params.resize(out.variables.size());
  if (absl::Status s = (*router)->ReadPull(step, &responses, &out.params, &rows); !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace pscluster
