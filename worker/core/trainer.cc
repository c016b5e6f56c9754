#include "worker/core/trainer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "worker/core/backend_factory.h"

namespace pscluster {
namespace {

// Recent epochs whose order stays cached (closures of epoch e and e+1 can overlap).
constexpr size_t kCachedEpochs = 2;

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const JobSpec& spec, std::vector<std::unique_ptr<PsClient>> ps,
    const std::vector<VariablePlacementProto>& placement) {
  auto t = std::unique_ptr<Trainer>(new Trainer());
  t->spec_ = spec;
  ASSIGN_OR_RETURN(t->model_, Model::Create(spec));
  if (t->model_->num_features() > 0) {
    return absl::UnimplementedError("the worker cannot train categorical features yet");
  }
  ASSIGN_OR_RETURN(t->train_, LoadDataset(spec.data.train, spec.model));
  ASSIGN_OR_RETURN(t->eval_, LoadDataset(spec.data.eval, spec.model));
  for (const Dataset* d : {&t->train_, &t->eval_}) {
    const DataSourceSpec& src = d == &t->train_ ? spec.data.train : spec.data.eval;
    if (d->features != t->model_->input_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", src.images, "' has ", d->features, " features per example but model.inputs.dense is ",
          t->model_->input_size()));
    }
    if (d->num_classes > t->model_->num_classes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", src.labels, "' has labels up to ", d->num_classes - 1, " but the last layer has ",
          t->model_->num_classes(), " units"));
    }
  }
  t->eval_order_ = EpochPermutation(t->eval_.count, spec.seed, 0, /*shuffle=*/false);

  t->ps_ = std::move(ps);
  if (t->ps_.empty()) return absl::InvalidArgumentError("the job has no PS task");
  t->vars_by_ps_.resize(t->ps_.size());
  const auto& vars = t->model_->variables();
  for (size_t v = 0; v < vars.size(); ++v) {
    int ps_index = -1;
    for (const auto& p : placement) {
      if (p.name() == vars[v].name()) ps_index = p.ps_index();
    }
    if (ps_index < 0 || ps_index >= static_cast<int>(t->ps_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("no valid PS placement for variable '", vars[v].name(), "'"));
    }
    t->vars_by_ps_[ps_index].push_back(static_cast<int>(v));
  }
  // Build one context up front: fails early (e.g. device: cuda on a machine
  // without a GPU) and names the backend.
  ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, t->AcquireContext());
  t->backend_name_ = ctx->backend->name();
  t->ReleaseContext(std::move(ctx));
  return t;
}

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer::Context>> Trainer::AcquireContext() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_contexts_.empty()) {
      auto ctx = std::move(free_contexts_.back());
      free_contexts_.pop_back();
      return ctx;
    }
  }
  auto ctx = std::make_unique<Context>();
  ASSIGN_OR_RETURN(ctx->backend, CreateBackend(spec_.device));
  for (const VariableSpecProto& v : model_->variables()) {
    ctx->params.emplace_back(Shape(v.shape().begin(), v.shape().end()));
  }
  return ctx;
}

void Trainer::ReleaseContext(std::unique_ptr<Context> ctx) {
  absl::MutexLock lock(&mu_);
  free_contexts_.push_back(std::move(ctx));
}

std::shared_ptr<const std::vector<int64_t>> Trainer::Order(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  auto order = std::make_shared<const std::vector<int64_t>>(
      EpochPermutation(train_.count, spec_.seed, epoch, spec_.data.shuffle));
  orders_[epoch] = order;
  while (orders_.size() > kCachedEpochs) orders_.erase(orders_.begin());
  return order;
}

absl::Status Trainer::Pull(Context* ctx) {
  const auto& vars = model_->variables();
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (vars_by_ps_[p].empty()) continue;
    PullRequest request;
    for (int v : vars_by_ps_[p]) request.add_names(vars[v].name());
    PullResponse response;
    RETURN_IF_ERROR(ps_[p]->Pull(request, &response));
    if (response.tensors_size() != request.names_size()) {
      return absl::InternalError(absl::StrCat("PS ", p, " returned ", response.tensors_size(),
                                              " tensors for ", request.names_size(), " names"));
    }
    for (int i = 0; i < response.tensors_size(); ++i) {
      const int v = vars_by_ps_[p][i];
      Tensor& dst = ctx->params[v];
      ASSIGN_OR_RETURN(absl::Span<const float> view,
                       TensorView(response.tensors(i).tensor(), dst.shape(),
                                  absl::StrCat("variable '", vars[v].name(), "' from PS ", p)));
      std::memcpy(dst.data(), view.data(), view.size() * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::Push(const Context& ctx) {
  const auto& vars = model_->variables();
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (vars_by_ps_[p].empty()) continue;
    PushRequest request;
    for (int v : vars_by_ps_[p]) {
      NamedTensor* g = request.add_gradients();
      g->set_name(vars[v].name());
      EncodeTensor(ctx.grads[v], g->mutable_tensor());
    }
    PushResponse response;
    RETURN_IF_ERROR(ps_[p]->Push(request, &response));
  }
  return absl::OkStatus();
}

void Trainer::Gather(const Dataset& data, const std::vector<int64_t>& order, int64_t begin,
                     int64_t end, Context* ctx) const {
  const int64_t n = end - begin;
  ModelBatch& batch = ctx->batch;
  batch.size = n;
  batch.x.resize(n * data.features);
  batch.y.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = order[begin + i];
    std::memcpy(batch.x.data() + i * data.features, data.x.data() + row * data.features,
                sizeof(float) * data.features);
    batch.y[i] = data.y[row];
  }
}

absl::Status Trainer::RunClosure(const RunClosureRequest& request, RunClosureResponse* response) {
  const bool train = request.mode() == TRAIN;
  const Dataset& data = train ? train_ : eval_;
  const DataSplit& split = request.split();
  if (split.begin() < 0 || split.begin() > split.end() || split.end() > data.count ||
      split.epoch() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "closure ", request.closure_id(), ": split [", split.begin(), ", ", split.end(),
        ") of epoch ", split.epoch(), " is outside the ", train ? "train" : "eval",
        " set of ", data.count, " examples"));
  }
  std::shared_ptr<const std::vector<int64_t>> order;
  if (train) order = Order(split.epoch());
  const std::vector<int64_t>& rows = train ? *order : eval_order_;

  ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, AcquireContext());
  const int64_t batch = spec_.data.per_replica_batch;
  absl::Status status;
  double compute = 0, pull = 0, push = 0;
  for (int64_t b = split.begin(); b < split.end() && status.ok(); b += batch) {
    const int64_t e = std::min(split.end(), b + batch);
    // Evaluation reads the model once per closure; training re-reads it every step.
    if (train || b == split.begin()) {
      const absl::Time t0 = absl::Now();
      status = Pull(ctx.get());
      pull += SecondsSince(t0);
      if (!status.ok()) break;
    }
    const absl::Time t0 = absl::Now();
    Gather(data, rows, b, e, ctx.get());
    StepResult step;
    if (train) {
      model_->TrainStep(ctx->backend.get(), ctx->params, ctx->batch, ctx->rows, &ctx->scratch,
                        &ctx->grads, &ctx->row_grads, &step);
    } else {
      model_->EvalStep(ctx->backend.get(), ctx->params, ctx->batch, ctx->rows, &ctx->scratch,
                       &step);
    }
    compute += SecondsSince(t0);
    if (train) {
      const absl::Time t1 = absl::Now();
      status = Push(*ctx);
      push += SecondsSince(t1);
    }
    if (status.ok()) {
      response->set_steps(response->steps() + 1);
      response->set_examples(response->examples() + step.examples);
      response->set_loss_sum(response->loss_sum() + step.loss_sum);
      response->set_correct(response->correct() + step.correct);
    }
  }
  response->set_compute_seconds(compute);
  response->set_pull_seconds(pull);
  response->set_push_seconds(push);
  ReleaseContext(std::move(ctx));
  return status;
}

}  // namespace pscluster
