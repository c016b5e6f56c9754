#include "evaluator/checkpoint_eval.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_paths.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "coordinator/core/checkpoint_manager.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "worker/core/trainer.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<CheckpointEval>> CheckpointEval::Create(Options options) {
  if (options.eval_closure_examples <= 0) {
    return absl::InvalidArgumentError("eval_closure_examples must be > 0");
  }
  JobSpec spec = options.spec;
  spec.strategy = Strategy::kParameterServer;
  spec.devices = 1;
  spec.device = DevicePreference::kAuto;
  spec.data.train = spec.data.eval;
  RETURN_IF_ERROR(ResolveReplicas(1, &spec));
  if (options.data_roots.has_value()) RETURN_IF_ERROR(CheckDataFiles(spec, *options.data_roots));
  return std::unique_ptr<CheckpointEval>(new CheckpointEval(std::move(options), std::move(spec)));
}

CheckpointEval::CheckpointEval(Options options, JobSpec eval_spec)
    : options_(std::move(options)), eval_spec_(std::move(eval_spec)) {}

CheckpointEval::~CheckpointEval() = default;

absl::Status CheckpointEval::Prepare(int num_ps) {
  trainer_.reset();
  clients_.clear();
  stores_.clear();
  num_ps_ = 0;
  ASSIGN_OR_RETURN(plan_,
                   PlanVariables(ModelVariables(eval_spec_), eval_spec_.partitioner, num_ps));
  std::vector<std::unique_ptr<PsClient>> trainer_ps;
  for (int i = 0; i < num_ps; ++i) {
    VariableStore::Options store_options;
    store_options.checkpoint_root = options_.checkpoint_dir;
    stores_.push_back(std::make_unique<VariableStore>(store_options));
    clients_.push_back(std::make_unique<InProcessPsClient>(stores_.back().get()));
    trainer_ps.push_back(std::make_unique<InProcessPsClient>(stores_.back().get()));
  }
  ASSIGN_OR_RETURN(trainer_, Trainer::Create(eval_spec_, std::move(trainer_ps), plan_.placement,
                                             options_.job_id));
  num_ps_ = num_ps;
  return absl::OkStatus();
}

absl::StatusOr<EvalMetrics> CheckpointEval::Evaluate(const CheckpointManifest& manifest) {
  const int num_ps = std::max(manifest.num_ps(), 1);
  if (num_ps != num_ps_ || trainer_ == nullptr) RETURN_IF_ERROR(Prepare(num_ps));
  std::vector<PsClient*> ps;
  for (auto& c : clients_) ps.push_back(c.get());
  CheckpointManager manager(options_.checkpoint_dir, /*keep=*/1, manifest.job_id());
  RETURN_IF_ERROR(manager.Restore(manifest, plan_, ps));

  const int64_t n = trainer_->eval_examples();
  const int64_t per_closure = options_.eval_closure_examples;
  int64_t examples = 0, correct = 0;
  double loss_sum = 0;
  std::vector<int64_t> positive, negative;
  auto merge = [](const auto& from, std::vector<int64_t>* into) {
    if (into->size() < static_cast<size_t>(from.size())) into->resize(from.size());
    for (int i = 0; i < from.size(); ++i) (*into)[i] += from.Get(i);
  };
  for (int64_t split = 0, begin = 0; begin < n; ++split, begin += per_closure) {
    RunClosureRequest request;
    request.set_job_id(options_.job_id);
    // An eval closure's id, as the coordinator's (phase_runner.h ClosureId).
    request.set_closure_id((int64_t{1} << 62) | split);
    request.set_mode(EVAL);
    request.mutable_split()->set_epoch(0);
    request.mutable_split()->set_begin(begin);
    request.mutable_split()->set_end(std::min(n, begin + per_closure));
    RunClosureResponse response;
    absl::Status s = trainer_->RunClosure(request, &response);
    if (absl::IsAborted(s)) {
      // A diverged model: every later eval of this checkpoint would fail too.
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", manifest.checkpoint_id(), ": ", s.message()));
    }
    RETURN_IF_ERROR(s);
    examples += response.examples();
    loss_sum += response.loss_sum();
    correct += response.correct();
    merge(response.positive_histogram(), &positive);
    merge(response.negative_histogram(), &negative);
  }
  EvalMetrics m;
  m.examples = examples;
  if (examples > 0) {
    m.loss = loss_sum / examples;
    m.accuracy = static_cast<double>(correct) / examples;
  }
  if (!positive.empty() || !negative.empty()) {
    const double auc = AucFromHistograms(positive, negative);
    if (!std::isnan(auc)) {
      m.has_auc = true;
      m.auc = auc;
    }
  }
  return m;
}

}  // namespace pscluster
