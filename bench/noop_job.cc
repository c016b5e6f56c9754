#include "bench/noop_job.h"

#include "common/job_spec.h"
#include "common/model_variables.h"

namespace pscluster {
namespace bench {
namespace {

constexpr char kSpec[] = R"(
model:
  inputs:
    dense: 2
    categorical: [{name: tag, hashed: true, embedding_dim: 2}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
optimizer: {type: sgd}
data:
  train: {format: synthetic_ctr, num_examples: 64, id_space: 16}
  eval: {format: synthetic_ctr, num_examples: 64, id_space: 16}
  per_replica_batch: 16
)";

}  // namespace

absl::StatusOr<SetupJobRequest> NoopSetupJob(const std::string& job_id) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kSpec, "noop_job.yaml");
  if (!spec.ok()) return spec.status();
  absl::StatusOr<VariablePlan> plan = PlanVariables(ModelVariables(*spec), spec->partitioner, 1);
  if (!plan.ok()) return plan.status();
  SetupJobRequest setup;
  setup.set_job_id(job_id);
  setup.set_spec_yaml(kSpec);
  setup.add_ps_addresses("in-process");
  for (const auto& p : plan->placement) *setup.add_placement() = p;
  return setup;
}

absl::Status InProcessWorker::Start() {
  absl::StatusOr<std::unique_ptr<RunningServer>> started =
      StartServer(ServerOptions(), {&service}, registry);
  if (!started.ok()) return started.status();
  server = *std::move(started);
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace pscluster
