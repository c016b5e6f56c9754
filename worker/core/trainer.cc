#include "worker/core/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model_variables.h"
#include "common/status_macros.h"
#include "worker/core/backend_factory.h"
#include "worker/core/stream_batches.h"

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

// Adds one step's counts, loss and histograms to the closure's response.
void AddStep(const StepResult& step, RunClosureResponse* response) {
  response->set_steps(response->steps() + 1);
  response->set_examples(response->examples() + step.examples);
  response->set_loss_sum(response->loss_sum() + step.loss_sum);
  response->set_correct(response->correct() + step.correct);
  AddHistogram(step.positive_histogram, response->mutable_positive_histogram());
  AddHistogram(step.negative_histogram, response->mutable_negative_histogram());
}

// Zero gradients shaped as `params` (empty for an embedding's entry) and
// `rows`, reusing the buffers of `grads` where their shapes fit.
void ZeroGradients(const std::vector<Tensor>& params, const std::vector<Tensor>& rows,
                   std::vector<Tensor>* grads, std::vector<Tensor>* row_grads) {
  grads->resize(params.size());
  for (size_t v = 0; v < params.size(); ++v) {
    const Tensor& p = params[v];
    Tensor& g = (*grads)[v];
    if (p.num_elements() == 0) {
      g = Tensor();
    } else if (g.shape() != p.shape() || g.num_elements() != p.num_elements()) {
      g = Tensor(p.shape());
    } else {
      std::fill(g.values().begin(), g.values().end(), 0.0f);
    }
  }
  row_grads->resize(rows.size());
  for (size_t f = 0; f < rows.size(); ++f) (*row_grads)[f] = Tensor(rows[f].shape());
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

// The replicas that share each step of a synchronous closure: those the
// coordinator formed for its split (DataSplit.replicas, re-formed when
// workers join or leave), else the job's.
int64_t SharesOf(const JobSpec& spec, const RunClosureRequest& request) {
  return request.split().replicas() > 0 ? request.split().replicas() : SyncShares(spec);
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
  // A streaming source stays on disk: closures read their units of it.
  for (auto [src, data, stream, where] :
       {std::tuple{&spec.data.train, &t->train_, &t->train_stream_, "data.train"},
        std::tuple{&spec.data.eval, &t->eval_, &t->eval_stream_, "data.eval"}}) {
    if (src->stream.enabled) {
      absl::StatusOr<RowEncoder> encoder = RowEncoder::Create(*src, spec.model, where);
      if (!encoder.ok()) return encoder.status();
      stream->emplace(*std::move(encoder));
      *data = (*stream)->Empty();
    } else {
      ASSIGN_OR_RETURN(*data, LoadDataset(*src, spec.model));
    }
  }
  for (const Dataset* d : {&t->train_, &t->eval_}) {
    const DataSourceSpec& src = d == &t->train_ ? spec.data.train : spec.data.eval;
    const std::string& file = src.format == "idx" ? src.images : src.path;
    const std::string what =
        src.format == "synthetic_ctr" ? "synthetic_ctr data" : "'" + file + "'";
    if (d->features != t->model_->input_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " has ", d->features, " features per example but model.inputs.dense is ",
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
  Pool::Options pool;
  pool.devices = spec.devices;
  pool.make_backend = [device = spec.device](const BackendOptions& options) {
    return CreateBackend(device, options);
  };
  pool.init_buffers = [model = t->model_.get()](StepBuffers* buffers) {
    // Embedding tables are never held whole: their entries stay empty.
    for (const VariableSpecProto& v : model->variables()) {
      if (IsRowAccessed(v)) {
        buffers->params.emplace_back();
      } else {
        buffers->params.emplace_back(Shape(v.shape().begin(), v.shape().end()));
      }
    }
  };
  t->pool_ = std::make_unique<Pool>(std::move(pool));
  // Build one workspace up front: fails early (e.g. device: cuda on a
  // machine without a GPU) and names the backend.
  ASSIGN_OR_RETURN(Pool::Lent workspace, t->pool_->Acquire());
  t->backend_name_ = workspace->devices->backend->name();
  return t;
}

Trainer::~Trainer() = default;

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

absl::Status Trainer::Pull(StepBuffers* buffers, const RunClosureRequest& closure) {
  buffers->pulled.resize(ps_.size());
  for (size_t p = 0; p < ps_.size(); ++p) {
    buffers->pulled[p].Clear();
    if (!HasWork(buffers->step.pull[p])) continue;
    buffers->step.pull[p].set_job(job_);
    // A pull alone rides on the closure's lease (a fused pull on its push's).
    if (!closure.lease().empty()) {
      UpdateKey* lease = buffers->step.pull[p].mutable_lease();
      lease->set_closure_id(closure.closure_id());
      lease->set_lease(closure.lease());
      lease->set_lease_steps(closure.lease_steps());
    } else {
      buffers->step.pull[p].clear_lease();
    }
    RETURN_IF_ERROR(ps_[p]->Pull(buffers->step.pull[p], &buffers->pulled[p]));
  }
  return router_->ReadPull(buffers->step, &buffers->pulled, &buffers->params, &buffers->rows);
}

absl::Status Trainer::Push(StepBuffers* buffers, const RunClosureRequest& closure,
                           int64_t step_index, int64_t global_step, bool with_next_pull,
                           int64_t sync_examples) {
  const bool sync = sync_examples >= 0;
  buffers->pushed.resize(ps_.size());
  // The version of this step's pull from each PS (-1: none), read before
  // the next pull replaces it: the PS measures the push's staleness.
  std::vector<int64_t> pulled_versions(ps_.size(), -1);
  for (size_t p = 0; p < ps_.size() && p < buffers->pulled.size(); ++p) {
    if (buffers->pulled[p].has_version()) pulled_versions[p] = buffers->pulled[p].version();
  }
  buffers->push_staleness = 0;
  if (with_next_pull) buffers->pulled.resize(ps_.size());
  // Every PS's push is started before any is waited for: the PS apply them
  // (and read the next pull) at the same time.
  std::vector<std::unique_ptr<PendingPsCall>> calls(ps_.size());
  for (size_t p = 0; p < ps_.size(); ++p) {
    PushRequest& push = buffers->push[p];
    const bool pull = with_next_pull && HasWork(buffers->step.pull[p]);
    if (with_next_pull) buffers->pulled[p].Clear();
    // A synchronous step needs every PS that holds the job's variables to
    // hear from every replica, with or without gradients for it.
    if (!HasWork(push) && !pull && !(sync && ps_holds_variables_[p])) continue;
    if (pull) {
      *push.mutable_pull() = buffers->step.pull[p];
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
      share->set_replicas(static_cast<int32_t>(SharesOf(spec_, closure)));
      share->set_examples(sync_examples);
      share->set_round(closure.round());
    } else {
      key->clear_sync();
    }
    if (!sync && pulled_versions[p] >= 0) {
      key->set_pulled_version(pulled_versions[p]);
    } else {
      key->clear_pulled_version();
    }
    calls[p] = ps_[p]->StartPush(push, &buffers->pushed[p]);
  }
  absl::Status status;
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (calls[p] == nullptr) continue;
    absl::Status s = calls[p]->Wait();  // every call, even after an error
    if (status.ok()) status = s;
    if (s.ok()) {
      buffers->push_staleness = std::max(buffers->push_staleness, buffers->pushed[p].staleness());
    }
    if (s.ok() && buffers->push[p].has_pull()) {
      buffers->pulled[p].Swap(buffers->pushed[p].mutable_pulled());
    }
  }
  RETURN_IF_ERROR(status);
  if (!with_next_pull) return absl::OkStatus();
  return router_->ReadPull(buffers->step, &buffers->pulled, &buffers->params, &buffers->rows);
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

void Trainer::TrainStep(Devices* devices, StepBuffers* buffers, StepResult* step) const {
  const int64_t n = buffers->batch.size;
  // per_replica_batch each; more when a synchronous share grew past
  // per_replica_batch x devices (replicas re-formed over fewer workers).
  const int64_t slots = static_cast<int64_t>(devices->slots.size());
  const int64_t per_device =
      std::max(spec_.data.per_replica_batch, slots > 0 ? (n + slots - 1) / slots : n);
  if (devices->slots.empty() || n <= per_device) {
    model_->TrainStep(devices->backend.get(), buffers->params, buffers->batch, buffers->rows,
                      &devices->scratch, &buffers->grads, &buffers->row_grads, step);
    return;
  }
  // Devices whose slice is empty (a short last step) sit out.
  const int64_t used = std::min<int64_t>(static_cast<int64_t>(devices->slots.size()),
                                         (n + per_device - 1) / per_device);
  auto run = [&](int d) {
    DeviceSlot& slot = *devices->slots[d];
    SubBatch(buffers->batch, d * per_device, std::min(n, (d + 1) * per_device), &slot.batch);
    slot.batch.seed = d == 0 ? buffers->batch.seed : StepSeed(buffers->batch.seed, d);
    slot.result = StepResult();
    model_->TrainStep(slot.backend.get(), buffers->params, slot.batch, buffers->rows, &slot.scratch,
                      &slot.grads, &slot.row_grads, &slot.result);
  };
  devices->threads->Run(static_cast<int>(used), run);
  // The gradients are means over each slice: weighted by its examples, their
  // sum is the mean over the batch.
  std::vector<const std::vector<Tensor>*> grads, row_grads;
  std::vector<float> weight;
  for (int64_t d = 0; d < used; ++d) {
    const DeviceSlot& slot = *devices->slots[d];
    grads.push_back(&slot.grads);
    row_grads.push_back(&slot.row_grads);
    weight.push_back(static_cast<float>(slot.batch.size) / static_cast<float>(n));
    step->examples += slot.result.examples;
    step->loss_sum += slot.result.loss_sum;
    step->correct += slot.result.correct;
  }
  WeightedSum(grads, weight, &buffers->grads);
  WeightedSum(row_grads, weight, &buffers->row_grads);
}

void Trainer::Gather(const Dataset& data, const std::vector<int64_t>& order, int64_t begin,
                     int64_t end, StepBuffers* buffers) const {
  const int64_t n = end - begin;
  ModelBatch& batch = buffers->batch;
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
  buffers->ids.resize(features);
  buffers->unique_ids.resize(features);
  for (size_t f = 0; f < features; ++f) {
    const CategoricalColumn& column = data.categorical[f];
    FeatureRows& rows = batch.features[f];
    std::vector<uint64_t>& ids = buffers->ids[f];
    rows.offsets.resize(n + 1);
    rows.offsets[0] = 0;
    ids.clear();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = order[begin + i];
      ids.insert(ids.end(), column.ids.begin() + column.offsets[row],
                 column.ids.begin() + column.offsets[row + 1]);
      rows.offsets[i + 1] = static_cast<int64_t>(ids.size());
    }
    DedupeIds(ids, &buffers->unique_ids[f], &rows.index);
  }
}

// What the steps of one running closure share: the request, where its
// examples come from, its borrowed workspace and the time spent so far.
struct Trainer::ClosureRun {
  const RunClosureRequest* request = nullptr;
  bool train = false;
  // A synchronous replica (strategy: central_storage) steps through the
  // split a global batch at a time and trains on its slice of each; others
  // train on per_replica_batch examples a step.
  bool sync = false;
  const Dataset* data = nullptr;
  // The examples' order: the epoch's training order (kept alive by
  // `epoch_order`), or eval_order_.
  std::shared_ptr<const std::vector<int64_t>> epoch_order;
  const std::vector<int64_t>* order = nullptr;
  int64_t batch = 0;          // examples a step
  int64_t replica_batch = 0;  // a worker's share of each step: one batch per device
  Pool::Lent workspace;       // returned to the pool with the ClosureRun
  // Seconds spent so far computing, pulling and pushing.
  double compute = 0;
  double pull = 0;
  double push = 0;
  // Training: true when the previous step's push already brought this
  // step's parameters (its batch gathered and its step planned).
  bool pulled_with_push = false;
  // The largest staleness the PS measured for this closure's pushes.
  int64_t max_push_staleness = 0;
  // The plan of the step after the last one trained: not OK when it failed.
  absl::Status next_plan;
  // A streaming unit (then `data` and `order` are null): its reader, the
  // current step's examples and their order (0, 1, ...).
  std::unique_ptr<StreamBatches> stream;
  Dataset stream_batch;
  std::vector<int64_t> stream_order;

  Devices& devices() { return *workspace->devices; }
  StepBuffers& buffers() { return workspace->buffers; }
  // This replica's slice [lo, hi) of the step [b, e).
  std::pair<int64_t, int64_t> Slice(int64_t b, int64_t e) const {
    if (!sync) return {b, e};
    const int64_t lo = std::min(e, b + request->replica() * replica_batch);
    return {lo, std::min(e, lo + replica_batch)};
  }
};

absl::Status Trainer::GatherStep(ClosureRun* run, int64_t lo, int64_t hi) const {
  if (run->stream == nullptr) {
    Gather(*run->data, *run->order, lo, hi, &run->buffers());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(run->stream->Next(hi - lo, &run->stream_batch));
  std::vector<int64_t>& order = run->stream_order;
  while (static_cast<int64_t>(order.size()) < run->stream_batch.count) {
    order.push_back(static_cast<int64_t>(order.size()));
  }
  Gather(run->stream_batch, order, 0, run->stream_batch.count, &run->buffers());
  return absl::OkStatus();
}

absl::Status Trainer::RunClosure(const RunClosureRequest& request, RunClosureResponse* response) {
  if (request.mode() == NOOP) return absl::OkStatus();  // no data, no PS, empty response
  if (request.mode() != TRAIN && request.mode() != EVAL && request.mode() != PREDICT) {
    return absl::InvalidArgumentError(
        absl::StrCat("closure ", request.closure_id(), ": unknown mode ", request.mode()));
  }
  ASSIGN_OR_RETURN(ClosureRun run, StartClosure(request));
  if (request.mode() == PREDICT) {
    // Filled step by step (PredictStep); its shape is set once every row is in.
    response->set_first_row(request.split().begin());
    response->mutable_predictions()->set_dtype(DT_FLOAT32);
    response->mutable_predictions()->clear_data();
  }
  absl::Status status = RunSteps(&run, response);
  if (run.stream != nullptr) {
    // Waits for the reader's end, so that its count of corrupt records is
    // final (every record was taken by the steps).
    if (status.ok()) status = run.stream->Finish();
    response->set_corrupt_records(run.stream->corrupt());
    response->set_first_corrupt(run.stream->first_corrupt());
  }
  response->set_compute_seconds(run.compute);
  response->set_pull_seconds(run.pull);
  response->set_push_seconds(run.push);
  if (run.train) response->set_max_push_staleness(run.max_push_staleness);
  return status;
}

absl::StatusOr<Trainer::ClosureRun> Trainer::StartClosure(const RunClosureRequest& request) {
  ClosureRun run;
  run.request = &request;
  run.train = request.mode() == TRAIN;
  run.data = run.train ? &train_ : &eval_;
  const DataSplit& split = request.split();
  const std::optional<RowEncoder>& stream = run.train ? train_stream_ : eval_stream_;
  if (!split.path().empty() || stream.has_value()) {
    // A unit of a streaming source: records [begin, end) of split.path().
    if (split.path().empty() || !stream.has_value() || request.mode() == PREDICT ||
        request.has_replica() || split.begin() < 0 || split.begin() > split.end() ||
        split.epoch() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "closure ", request.closure_id(), ": split ", split.ShortDebugString(),
          " does not name a unit of the job's ", run.train ? "train" : "eval",
          stream.has_value() ? " stream (a file and its record range; no PREDICT or replica)"
                             : " data, which is in memory, not streamed"));
    }
    run.stream = std::make_unique<StreamBatches>(
        run.train ? spec_.data.train : spec_.data.eval, &*stream, split, spec_.seed,
        run.train && spec_.data.shuffle);
    run.data = nullptr;  // GatherStep reads the stream (a ClosureRun moves: no self-pointers)
  } else if (split.begin() < 0 || split.begin() > split.end() || split.end() > run.data->count ||
             split.epoch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("closure ", request.closure_id(), ": split [", split.begin(), ", ",
                     split.end(), ") of epoch ", split.epoch(), " is outside the ",
                     run.train ? "train" : "eval", " set of ", run.data->count, " examples"));
  }
  if (run.train && run.stream == nullptr) run.epoch_order = Order(split.epoch());
  run.order = run.stream != nullptr ? nullptr
              : run.train           ? run.epoch_order.get()
                                    : &eval_order_;
  ASSIGN_OR_RETURN(run.workspace, pool_->Acquire());
  run.sync = run.train && request.has_replica();
  const int64_t shares = SharesOf(spec_, request);
  if (run.sync &&
      (shares > JobLimits::kMaxReplicas || request.replica() < 0 || request.replica() >= shares)) {
    return absl::InvalidArgumentError(absl::StrCat("closure ", request.closure_id(), ": replica ",
                                                   request.replica(), " of a split of ", shares,
                                                   " replicas"));
  }
  run.batch = run.train ? StepExamples(spec_) : spec_.data.per_replica_batch;
  // A share of the global batch: per_replica_batch x devices when the
  // replicas are the job's; re-formed ones split the same global batch
  // (the last share may be short, or empty).
  run.replica_batch =
      run.sync ? (run.batch + shares - 1) / shares : spec_.data.per_replica_batch * spec_.devices;
  return run;
}

absl::Status Trainer::RunSteps(ClosureRun* run, RunClosureResponse* response) {
  const DataSplit& split = run->request->split();
  for (int64_t b = split.begin(); b < split.end(); b += run->batch) {
    const int64_t e = std::min(split.end(), b + run->batch);
    if (!run->pulled_with_push) RETURN_IF_ERROR(GatherAndPull(run, b, e));
    StepResult step;
    if (run->train) {
      RETURN_IF_ERROR(TrainAndPush(run, b, e, &step));
    } else if (run->request->mode() == PREDICT) {
      RETURN_IF_ERROR(PredictStep(run, b, e, &step, response->mutable_predictions()));
    } else {
      RETURN_IF_ERROR(Evaluate(run, b, e, &step));
    }
    AddStep(step, response);
    // This step's push went out; the next step could not be planned.
    RETURN_IF_ERROR(run->next_plan);
  }
  return absl::OkStatus();
}

absl::Status Trainer::GatherAndPull(ClosureRun* run, int64_t begin, int64_t end) {
  StepBuffers& buffers = run->buffers();
  const auto [lo, hi] = run->Slice(begin, end);
  absl::Time t0 = absl::Now();
  const absl::Status gathered = GatherStep(run, lo, hi);
  run->compute += SecondsSince(t0);
  RETURN_IF_ERROR(gathered);
  // Evaluation reads the dense variables once per closure; training
  // re-reads them every step. Embedding rows are looked up every step.
  const bool dense = run->train || begin == run->request->split().begin();
  const bool lookups = model_->num_features() > 0;
  if (!dense && !lookups) return absl::OkStatus();
  t0 = absl::Now();
  absl::Status status = router_->PlanStep(dense, buffers.unique_ids, &buffers.step);
  if (status.ok()) status = Pull(&buffers, *run->request);
  run->pull += SecondsSince(t0);
  return status;
}

absl::Status Trainer::TrainAndPush(ClosureRun* run, int64_t begin, int64_t end, StepResult* step) {
  const RunClosureRequest& request = *run->request;
  const DataSplit& split = request.split();
  StepBuffers& buffers = run->buffers();
  const auto [lo, hi] = run->Slice(begin, end);
  const absl::Time t0 = absl::Now();
  // The step's 0-based number in the job's training order (every epoch
  // has ceil(examples / batch) steps), to name it in errors and to pick
  // its learning rate on the PS (UpdateKey.global_step).
  const int64_t global_step =
      run->stream != nullptr
          ? split.epoch() * split.epoch_steps() + split.first_step() +
                (begin - split.begin()) / run->batch
          : split.epoch() * ((train_.count + run->batch - 1) / run->batch) + begin / run->batch;
  // Dropout masks depend only on (seed, global step, replica): a
  // retried closure pushes the same gradients.
  buffers.batch.seed = StepSeed(spec_.seed, global_step);
  if (run->sync && request.replica() > 0) {
    buffers.batch.seed = StepSeed(buffers.batch.seed, request.replica());
  }
  // (A stream's step may hold fewer examples than its slice, or none.)
  if (buffers.batch.size > 0) TrainStep(&run->devices(), &buffers, step);
  // A diverged model: its gradients are not pushed.
  if (!std::isfinite(step->loss_sum)) {
    run->compute += SecondsSince(t0);
    return NonFiniteLoss(*step, absl::StrCat("at global step ", global_step), request);
  }
  if (buffers.batch.size == 0) {
    // An empty slice (the epoch's last step is short): a share of no
    // examples still counts the replica in, with zero gradients of the
    // usual shapes (a mirrored ring fuses the same layout everywhere).
    ZeroGradients(buffers.params, buffers.rows, &buffers.grads, &buffers.row_grads);
  }
  router_->BuildPush(buffers.step, &buffers.grads, buffers.row_grads, &buffers.push);
  PlanNextStep(run, end);
  run->compute += SecondsSince(t0);
  const absl::Time t1 = absl::Now();
  absl::Status status = Push(&buffers, request, (begin - split.begin()) / run->batch, global_step,
                             run->pulled_with_push, run->sync ? hi - lo : -1);
  run->push += SecondsSince(t1);
  run->max_push_staleness = std::max(run->max_push_staleness, buffers.push_staleness);
  if (absl::IsInvalidArgument(status) && absl::StrContains(status.message(), "non-finite")) {
    // The PS refused a NaN or Inf gradient (ps/core/variable_store.h):
    // the model diverged, as with a non-finite loss.
    return absl::AbortedError(absl::StrCat("non-finite gradient at global step ", global_step,
                                           " (closure ", request.closure_id(),
                                           "), refused by the PS: ", status.message()));
  }
  return status;
}

void Trainer::PlanNextStep(ClosureRun* run, int64_t end) const {
  // The next step of this closure is gathered and planned now, so that
  // its pull rides on this push. A plan that fails (e.g. an id outside
  // a vocabulary) still lets this step's push go out alone first.
  run->pulled_with_push = false;
  const int64_t split_end = run->request->split().end();
  if (end >= split_end) return;
  StepBuffers& buffers = run->buffers();
  const auto [lo, hi] = run->Slice(end, std::min(split_end, end + run->batch));
  run->next_plan = GatherStep(run, lo, hi);
  if (!run->next_plan.ok()) return;
  run->next_plan = router_->PlanStep(/*with_dense=*/true, buffers.unique_ids, &buffers.step);
  run->pulled_with_push = run->next_plan.ok();
}

absl::Status Trainer::Evaluate(ClosureRun* run, int64_t begin, int64_t end,
                               StepResult* step) const {
  StepBuffers& buffers = run->buffers();
  Devices& devices = run->devices();
  if (buffers.batch.size == 0) return absl::OkStatus();  // a stream's end, short of records
  const absl::Time t0 = absl::Now();
  model_->EvalStep(devices.backend.get(), buffers.params, buffers.batch, buffers.rows,
                   &devices.scratch, step);
  run->compute += SecondsSince(t0);
  if (!std::isfinite(step->loss_sum)) {
    return NonFiniteLoss(*step, absl::StrCat("in evaluation, examples [", begin, ", ", end, ")"),
                         *run->request);
  }
  return absl::OkStatus();
}

absl::Status Trainer::PredictStep(ClosureRun* run, int64_t begin, int64_t end, StepResult* step,
                                  TensorProto* predictions) const {
  StepBuffers& buffers = run->buffers();
  Devices& devices = run->devices();
  const absl::Time t0 = absl::Now();
  std::vector<float>& outputs = buffers.predictions;
  model_->Predict(devices.backend.get(), buffers.params, buffers.batch, buffers.rows,
                  &devices.scratch, &outputs);
  run->compute += SecondsSince(t0);
  const int64_t n = end - begin;
  const int64_t width = n > 0 ? static_cast<int64_t>(outputs.size()) / n : 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!std::isfinite(outputs[i])) {
      return absl::AbortedError(absl::StrCat("non-finite prediction (", outputs[i], ") for row ",
                                             begin + static_cast<int64_t>(i) / width, " (closure ",
                                             run->request->closure_id(), ")"));
    }
  }
  // Tensors travel as little-endian bytes (protos/tensor.proto); this
  // machine is little-endian, as every platform the project builds for.
  predictions->mutable_data()->append(reinterpret_cast<const char*>(outputs.data()),
                                      outputs.size() * sizeof(float));
  predictions->clear_shape();
  const int64_t rows_so_far = end - run->request->split().begin();
  predictions->add_shape(rows_so_far);
  predictions->add_shape(width);
  step->examples = n;
  return absl::OkStatus();
}

}  // namespace pscluster
