#include "worker/core/trainer.h"

#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model_variables.h"
#include "common/status_macros.h"
#include "worker/core/backend_factory.h"

namespace pscluster {
namespace {

// Recent epochs whose order stays cached (closures of epoch e and e+1 can overlap).
constexpr size_t kCachedEpochs = 2;

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

void AddHistogram(const std::vector<int64_t>& counts,
                  google::protobuf::RepeatedField<int64_t>* total) {
  if (counts.empty()) return;
  if (total->empty()) total->Resize(static_cast<int>(counts.size()), 0);
  for (size_t i = 0; i < counts.size(); ++i) (*total)[static_cast<int>(i)] += counts[i];
}

// ABORTED (a closure error the coordinator retries, then fails the job
// with): "non-finite loss (nan) at global step N (epoch E, closure C)".
absl::Status NonFiniteLoss(const StepResult& step, const std::string& where,
                           const RunClosureRequest& request) {
  const double loss = step.examples > 0 ? step.loss_sum / step.examples : step.loss_sum;
  return absl::AbortedError(absl::StrCat("non-finite loss (", loss, ") ", where, " (epoch ",
                                         request.split().epoch() + 1, ", closure ",
                                         request.closure_id(), ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const JobSpec& spec, std::vector<std::unique_ptr<PsClient>> ps,
    const std::vector<VariablePlacementProto>& placement, const std::string& job) {
  auto t = std::unique_ptr<Trainer>(new Trainer());
  t->spec_ = spec;
  t->job_ = job;
  ASSIGN_OR_RETURN(t->model_, Model::Create(spec));
  // Placement first: it is cheap to check and names the variable at fault.
  t->ps_ = std::move(ps);
  if (t->ps_.empty()) return absl::InvalidArgumentError("the job has no PS task");
  ASSIGN_OR_RETURN(t->router_, ParamRouter::Create(t->model_->variables(), placement,
                                                   static_cast<int>(t->ps_.size())));
  t->ps_holds_variables_.assign(t->ps_.size(), false);
  for (const VariablePlacementProto& v : placement) {
    if (v.shards_size() == 0) t->ps_holds_variables_[v.ps_index()] = true;
    for (const ShardProto& shard : v.shards()) t->ps_holds_variables_[shard.ps_index()] = true;
  }
  ASSIGN_OR_RETURN(t->train_, LoadDataset(spec.data.train, spec.model));
  ASSIGN_OR_RETURN(t->eval_, LoadDataset(spec.data.eval, spec.model));
  for (const Dataset* d : {&t->train_, &t->eval_}) {
    const DataSourceSpec& src = d == &t->train_ ? spec.data.train : spec.data.eval;
    const std::string& file = src.format == "idx" ? src.images : src.path;
    const std::string what = src.format == "synthetic_ctr" ? "synthetic_ctr data" : "'" + file + "'";
    if (d->features != t->model_->input_size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has ", d->features,
                                                     " features per example but model.inputs.dense is ",
                                                     t->model_->input_size()));
    }
    if (d->num_classes > t->model_->num_classes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          src.format == "idx" ? "'" + src.labels + "'" : what, " has labels up to ",
          d->num_classes - 1, " but the model has ", t->model_->num_classes(), " classes"));
    }
    if (static_cast<int>(d->categorical.size()) != t->model_->num_features()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has ", d->categorical.size(),
                                                     " categorical columns for ",
                                                     t->model_->num_features(), " features"));
    }
  }
  t->eval_order_ = EpochPermutation(t->eval_.count, spec.seed, 0, /*shuffle=*/false);
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
  if (spec_.devices > 1) {
    for (int64_t d = 0; d < spec_.devices; ++d) {
      auto slot = std::make_unique<DeviceSlot>();
      // Replica d on GPU d (mod the GPUs there are), or on the CPU.
      BackendOptions options;
      options.cuda_device = static_cast<int>(d);
      ASSIGN_OR_RETURN(slot->backend, CreateBackend(spec_.device, options));
      ctx->devices.push_back(std::move(slot));
    }
    ctx->device_threads = std::make_unique<DeviceThreads>(static_cast<int>(spec_.devices) - 1);
  }
  // Embedding tables are never held whole: their entries stay empty.
  for (const VariableSpecProto& v : model_->variables()) {
    if (IsRowAccessed(v)) {
      ctx->params.emplace_back();
    } else {
      ctx->params.emplace_back(Shape(v.shape().begin(), v.shape().end()));
    }
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

absl::Status Trainer::Pull(Context* ctx, const RunClosureRequest& closure) {
  ctx->pulled.resize(ps_.size());
  for (size_t p = 0; p < ps_.size(); ++p) {
    ctx->pulled[p].Clear();
    if (!HasWork(ctx->step.pull[p])) continue;
    ctx->step.pull[p].set_job(job_);
    // A pull alone rides on the closure's lease (a fused pull on its push's).
    if (!closure.lease().empty()) {
      UpdateKey* lease = ctx->step.pull[p].mutable_lease();
      lease->set_closure_id(closure.closure_id());
      lease->set_lease(closure.lease());
      lease->set_lease_steps(closure.lease_steps());
    } else {
      ctx->step.pull[p].clear_lease();
    }
    RETURN_IF_ERROR(ps_[p]->Pull(ctx->step.pull[p], &ctx->pulled[p]));
  }
  return router_->ReadPull(ctx->step, &ctx->pulled, &ctx->params, &ctx->rows);
}

absl::Status Trainer::Push(Context* ctx, const RunClosureRequest& closure, int64_t step_index,
                           int64_t global_step, bool with_next_pull, int64_t sync_examples) {
  const bool sync = sync_examples >= 0;
  ctx->pushed.resize(ps_.size());
  if (with_next_pull) ctx->pulled.resize(ps_.size());
  // Every PS's push is started before any is waited for: the PS apply them
  // (and read the next pull) at the same time.
  std::vector<std::unique_ptr<PendingPsCall>> calls(ps_.size());
  for (size_t p = 0; p < ps_.size(); ++p) {
    PushRequest& push = ctx->push[p];
    const bool pull = with_next_pull && HasWork(ctx->step.pull[p]);
    if (with_next_pull) ctx->pulled[p].Clear();
    // A synchronous step needs every PS that holds the job's variables to
    // hear from every replica, with or without gradients for it.
    if (!HasWork(push) && !pull && !(sync && ps_holds_variables_[p])) continue;
    if (pull) {
      *push.mutable_pull() = ctx->step.pull[p];
    } else {
      push.clear_pull();
    }
    // The PS applies each (closure, step) once: a retried closure's steps
    // that were already applied are dropped there (and the pull answered).
    push.set_job(job_);
    // The coordinator's lease on this closure's keys (common/update_lease.h).
    UpdateKey* key = push.mutable_update();
    key->set_closure_id(closure.closure_id());
    key->set_step(step_index);
    // Picks the learning rate of a schedule on the PS; the same for a retry.
    key->set_global_step(global_step);
    key->set_lease(closure.lease());
    key->set_lease_steps(closure.lease_steps());
    if (sync) {
      SyncShare* share = key->mutable_sync();
      share->set_replica(closure.replica());
      share->set_replicas(static_cast<int32_t>(SyncShares(spec_)));
      share->set_examples(sync_examples);
      share->set_round(closure.round());
    } else {
      key->clear_sync();
    }
    calls[p] = ps_[p]->StartPush(push, &ctx->pushed[p]);
  }
  absl::Status status;
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (calls[p] == nullptr) continue;
    absl::Status s = calls[p]->Wait();  // every call, even after an error
    if (status.ok()) status = s;
    if (s.ok() && ctx->push[p].has_pull()) ctx->pulled[p].Swap(ctx->pushed[p].mutable_pulled());
  }
  RETURN_IF_ERROR(status);
  if (!with_next_pull) return absl::OkStatus();
  return router_->ReadPull(ctx->step, &ctx->pulled, &ctx->params, &ctx->rows);
}

namespace {

// Examples [begin, end) of `in` as a batch of their own; feature indexes
// still point into the whole batch's unique rows.
void SubBatch(const ModelBatch& in, int64_t begin, int64_t end, ModelBatch* out) {
  const int64_t n = end - begin;
  const int64_t width = in.size > 0 ? static_cast<int64_t>(in.x.size()) / in.size : 0;
  out->size = n;
  out->x.assign(in.x.begin() + begin * width, in.x.begin() + end * width);
  out->y.assign(in.y.begin() + begin, in.y.begin() + end);
  out->features.resize(in.features.size());
  for (size_t f = 0; f < in.features.size(); ++f) {
    const FeatureRows& from = in.features[f];
    FeatureRows& to = out->features[f];
    const int64_t first = from.offsets[begin];
    to.offsets.resize(n + 1);
    for (int64_t i = 0; i <= n; ++i) to.offsets[i] = from.offsets[begin + i] - first;
    to.index.assign(from.index.begin() + first, from.index.begin() + from.offsets[end]);
  }
}

// out = sum_d weight[d] * in[d], tensor by tensor (empty entries stay empty).
void WeightedSum(const std::vector<const std::vector<Tensor>*>& in,
                 const std::vector<float>& weight, std::vector<Tensor>* out) {
  out->resize(in[0]->size());
  for (size_t v = 0; v < in[0]->size(); ++v) {
    const Tensor& first = (*in[0])[v];
    Tensor& o = (*out)[v];
    if (first.num_elements() == 0) {  // an embedding's entry of the dense gradients
      o = Tensor();
      continue;
    }
    if (o.shape() != first.shape() || o.num_elements() != first.num_elements()) {
      o = Tensor(first.shape());
    }
    std::fill(o.values().begin(), o.values().end(), 0.0f);
    for (size_t d = 0; d < in.size(); ++d) {
      const float* g = (*in[d])[v].data();
      float* dst = o.data();
      const float w = weight[d];
      for (int64_t i = 0, n = static_cast<int64_t>(o.values().size()); i < n; ++i) {
        dst[i] += w * g[i];
      }
    }
  }
}

}  // namespace

Trainer::DeviceThreads::DeviceThreads(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Loop(i + 1); });
}

Trainer::DeviceThreads::~DeviceThreads() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void Trainer::DeviceThreads::Loop(int index) {
  int64_t seen = 0;
  while (true) {
    const std::function<void(int)>* fn;
    {
      absl::MutexLock lock(&mu_);
      auto woken = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || generation_ != seen;
      };
      mu_.Await(absl::Condition(&woken));
      if (stop_) return;
      seen = generation_;
      if (index >= n_) continue;  // not needed for this step
      fn = fn_;
    }
    (*fn)(index);
    absl::MutexLock lock(&mu_);
    --pending_;
  }
}

void Trainer::DeviceThreads::Run(int n, const std::function<void(int)>& fn) {
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    pending_ = n - 1;
    ++generation_;
  }
  fn(0);
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.Await(absl::Condition(&done));
}

void Trainer::TrainStep(Context* ctx, StepResult* step) const {
  const int64_t n = ctx->batch.size;
  const int64_t per_device = spec_.data.per_replica_batch;
  if (ctx->devices.empty() || n <= per_device) {
    model_->TrainStep(ctx->backend.get(), ctx->params, ctx->batch, ctx->rows, &ctx->scratch,
                      &ctx->grads, &ctx->row_grads, step);
    return;
  }
  // Devices whose slice is empty (a short last step) sit out.
  const int64_t used = std::min<int64_t>(static_cast<int64_t>(ctx->devices.size()),
                                         (n + per_device - 1) / per_device);
  auto run = [&](int d) {
    DeviceSlot& slot = *ctx->devices[d];
    SubBatch(ctx->batch, d * per_device, std::min(n, (d + 1) * per_device), &slot.batch);
    slot.batch.seed = d == 0 ? ctx->batch.seed : StepSeed(ctx->batch.seed, d);
    slot.result = StepResult();
    model_->TrainStep(slot.backend.get(), ctx->params, slot.batch, ctx->rows, &slot.scratch,
                      &slot.grads, &slot.row_grads, &slot.result);
  };
  ctx->device_threads->Run(static_cast<int>(used), run);
  // The gradients are means over each slice: weighted by its examples, their
  // sum is the mean over the batch.
  std::vector<const std::vector<Tensor>*> grads, row_grads;
  std::vector<float> weight;
  for (int64_t d = 0; d < used; ++d) {
    const DeviceSlot& slot = *ctx->devices[d];
    grads.push_back(&slot.grads);
    row_grads.push_back(&slot.row_grads);
    weight.push_back(static_cast<float>(slot.batch.size) / static_cast<float>(n));
    step->examples += slot.result.examples;
    step->loss_sum += slot.result.loss_sum;
    step->correct += slot.result.correct;
  }
  WeightedSum(grads, weight, &ctx->grads);
  WeightedSum(row_grads, weight, &ctx->row_grads);
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
  const size_t features = data.categorical.size();
  batch.features.resize(features);
  ctx->ids.resize(features);
  ctx->unique_ids.resize(features);
  for (size_t f = 0; f < features; ++f) {
    const CategoricalColumn& column = data.categorical[f];
    FeatureRows& rows = batch.features[f];
    std::vector<uint64_t>& ids = ctx->ids[f];
    rows.offsets.resize(n + 1);
    rows.offsets[0] = 0;
    ids.clear();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = order[begin + i];
      ids.insert(ids.end(), column.ids.begin() + column.offsets[row],
                 column.ids.begin() + column.offsets[row + 1]);
      rows.offsets[i + 1] = static_cast<int64_t>(ids.size());
    }
    DedupeIds(ids, &ctx->unique_ids[f], &rows.index);
  }
}

absl::Status Trainer::RunClosure(const RunClosureRequest& request, RunClosureResponse* response) {
  if (request.mode() == NOOP) return absl::OkStatus();  // no data, no PS, empty response
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
  // A synchronous replica (strategy: central_storage) steps through the
  // split a global batch at a time and trains on its slice of each; others
  // train on per_replica_batch examples a step.
  const bool sync = train && request.has_replica();
  if (sync && (request.replica() < 0 || request.replica() >= SyncShares(spec_))) {
    ReleaseContext(std::move(ctx));
    return absl::InvalidArgumentError(absl::StrCat("closure ", request.closure_id(),
                                                   ": replica ", request.replica(),
                                                   " of a job of ", SyncShares(spec_),
                                                   " workers"));
  }
  // A worker's share of each step: one batch per device.
  const int64_t replica_batch = spec_.data.per_replica_batch * spec_.devices;
  const int64_t batch = train ? StepExamples(spec_) : spec_.data.per_replica_batch;
  // This replica's slice [lo, hi) of the step [b, e).
  auto slice = [&](int64_t b, int64_t e) -> std::pair<int64_t, int64_t> {
    if (!sync) return {b, e};
    const int64_t lo = std::min(e, b + request.replica() * replica_batch);
    return {lo, std::min(e, lo + replica_batch)};
  };
  absl::Status status;
  double compute = 0, pull = 0, push = 0;
  const bool lookups = model_->num_features() > 0;
  // Training: true when the previous step's push already brought this
  // step's parameters (its batch gathered and its step planned).
  bool pulled_with_push = false;
  absl::Status next_plan;
  for (int64_t b = split.begin(); b < split.end() && status.ok(); b += batch) {
    const int64_t e = std::min(split.end(), b + batch);
    const auto [lo, hi] = slice(b, e);
    absl::Time t0 = absl::Now();
    if (!pulled_with_push) {
      Gather(data, rows, lo, hi, ctx.get());
      compute += SecondsSince(t0);
      // Evaluation reads the dense variables once per closure; training
      // re-reads them every step. Embedding rows are looked up every step.
      const bool dense = train || b == split.begin();
      if (dense || lookups) {
        t0 = absl::Now();
        status = router_->PlanStep(dense, ctx->unique_ids, &ctx->step);
        if (status.ok()) status = Pull(ctx.get(), request);
        pull += SecondsSince(t0);
        if (!status.ok()) break;
      }
    }
    t0 = absl::Now();
    StepResult step;
    // The step's 0-based number in the job's training order (every epoch
    // has ceil(examples / batch) steps), to name it in errors and to pick
    // its learning rate on the PS (UpdateKey.global_step).
    const int64_t global_step = split.epoch() * ((train_.count + batch - 1) / batch) + b / batch;
    if (train) {
      // Dropout masks depend only on (seed, global step, replica): a
      // retried closure pushes the same gradients.
      ctx->batch.seed = StepSeed(spec_.seed, global_step);
      if (sync && request.replica() > 0) {
        ctx->batch.seed = StepSeed(ctx->batch.seed, request.replica());
      }
      if (hi > lo) TrainStep(ctx.get(), &step);
      // A diverged model: its gradients are not pushed.
      if (!std::isfinite(step.loss_sum)) {
        status = NonFiniteLoss(step, absl::StrCat("at global step ", global_step), request);
        compute += SecondsSince(t0);
        break;
      }
      if (hi > lo) {
        router_->BuildPush(ctx->step, &ctx->grads, ctx->row_grads, &ctx->push);
      } else {
        // An empty slice (the epoch's last step is short): a share of no
        // examples still counts the replica in, with zero gradients of the
        // usual shapes (a mirrored ring fuses the same layout everywhere).
        ctx->grads.resize(ctx->params.size());
        for (size_t v = 0; v < ctx->params.size(); ++v) {
          const Tensor& p = ctx->params[v];
          Tensor& g = ctx->grads[v];
          if (p.num_elements() == 0) {
            g = Tensor();
          } else if (g.shape() != p.shape() || g.num_elements() != p.num_elements()) {
            g = Tensor(p.shape());
          } else {
            std::fill(g.values().begin(), g.values().end(), 0.0f);
          }
        }
        ctx->row_grads.resize(ctx->rows.size());
        for (size_t f = 0; f < ctx->rows.size(); ++f) {
          ctx->row_grads[f] = Tensor(ctx->rows[f].shape());
        }
        router_->BuildPush(ctx->step, &ctx->grads, ctx->row_grads, &ctx->push);
      }
      // The next step of this closure is gathered and planned now, so that
      // its pull rides on this push. A plan that fails (e.g. an id outside
      // a vocabulary) still lets this step's push go out alone first.
      pulled_with_push = false;
      if (e < split.end()) {
        const auto [next_lo, next_hi] = slice(e, std::min(split.end(), e + batch));
        Gather(data, rows, next_lo, next_hi, ctx.get());
        next_plan = router_->PlanStep(/*with_dense=*/true, ctx->unique_ids, &ctx->step);
        pulled_with_push = next_plan.ok();
      }
      compute += SecondsSince(t0);
      const absl::Time t1 = absl::Now();
      status = Push(ctx.get(), request, (b - split.begin()) / batch, global_step,
                    pulled_with_push, sync ? hi - lo : -1);
      push += SecondsSince(t1);
      if (absl::IsInvalidArgument(status) && absl::StrContains(status.message(), "non-finite")) {
        // The PS refused a NaN or Inf gradient (ps/core/variable_store.h):
        // the model diverged, as with a non-finite loss.
        status = absl::AbortedError(absl::StrCat("non-finite gradient at global step ", global_step,
                                                 " (closure ", request.closure_id(),
                                                 "), refused by the PS: ", status.message()));
      }
    } else {
      model_->EvalStep(ctx->backend.get(), ctx->params, ctx->batch, ctx->rows, &ctx->scratch,
                       &step);
      compute += SecondsSince(t0);
      if (!std::isfinite(step.loss_sum)) {
        status = NonFiniteLoss(step, absl::StrCat("in evaluation, examples [", b, ", ", e, ")"),
                               request);
        break;
      }
    }
    if (status.ok()) {
      response->set_steps(response->steps() + 1);
      response->set_examples(response->examples() + step.examples);
      response->set_loss_sum(response->loss_sum() + step.loss_sum);
      response->set_correct(response->correct() + step.correct);
      AddHistogram(step.positive_histogram, response->mutable_positive_histogram());
      AddHistogram(step.negative_histogram, response->mutable_negative_histogram());
      // This step's push went out; the next step could not be planned.
      status = next_plan;
    }
  }
  response->set_compute_seconds(compute);
  response->set_pull_seconds(pull);
  response->set_push_seconds(push);
  ReleaseContext(std::move(ctx));
  return status;
}

}  // namespace pscluster
