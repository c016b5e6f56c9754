// Trainer: a worker's side of a job. Runs closures — N training steps (or an
// evaluation) over a data split — against the PS tasks that hold the model.
//
// Each training step gathers the batch (dense features, labels and the ids
// of each categorical feature, deduped), then makes ONE fused pull per PS:
// every whole-read variable (or its shards) plus the rows of the batch's
// unique ids from each embedding table (ParamRouter); embedding tables are
// never pulled whole. It runs forward and backward on the backend and makes
// ONE fused push per PS: dense gradients split by shard, and the summed
// gradient of each unique embedding row. Within a closure, the push of step
// k also carries the pull of step k+1 (PushRequest.pull, answered after the
// push is applied), so a training step costs one round trip per PS. An evaluation reads the dense
// variables once per closure and looks up rows every step. Steps are
// asynchronous: other closures, here or on other workers, update the same
// variables between this step's pull and push.
//
// Thread-safe: several closures may run at once; each borrows its own
// backend and scratch buffers from a pool (device_pool.h).
#ifndef PSCLUSTER_WORKER_CORE_TRAINER_H_
#define PSCLUSTER_WORKER_CORE_TRAINER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "common/ps_client.h"
#include "common/tensor.h"
#include "protos/worker.pb.h"
#include "worker/core/dataset.h"
#include "worker/core/device_pool.h"
#include "worker/core/model.h"
#include "worker/core/param_router.h"
#include "worker/core/row_encoder.h"

namespace pscluster {

class Trainer {
 public:
  // Builds the trainer: loads the train and eval data named in `spec` (a
  // streaming source is not loaded: each closure reads its unit),
  // builds the model and checks `placement` (ParamRouter::Create: every
  // model variable placed once on a valid PS, shards contiguous and covering
  // all rows). `ps[i]` is PS task i (owned). Errors: NOT_FOUND for a missing
  // data file, INVALID_ARGUMENT for data that does not fit the model or a
  // bad placement, FAILED_PRECONDITION for device: cuda without a GPU.
  // Every pull and push names `job`, the job's namespace on the PS
  // (ps/core/job_stores.h).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const JobSpec& spec, std::vector<std::unique_ptr<PsClient>> ps,
      const std::vector<VariablePlacementProto>& placement, const std::string& job = "");

  ~Trainer();

  // Runs one closure. INVALID_ARGUMENT for a split outside the data set or
  // an id outside a fixed vocabulary; PS errors are returned as they came
  // (UNAVAILABLE when a PS is down). A failed closure may have pushed some of
  // its steps. ABORTED for a diverged model: a step whose loss is NaN or Inf
  // ("non-finite loss (nan) at global step N (epoch E, closure C)"; that
  // step's gradients are not pushed; an evaluation names its examples), or a
  // push the PS refused as non-finite ("non-finite gradient at global step
  // N ..."). Global steps count from 0 over the job's training order, every
  // epoch having ceil(train examples / per_replica_batch) of them; each push
  // carries its step's (UpdateKey.global_step), which picks the step's
  // learning rate when the job has a schedule (a retry sends the same).
  // A split with a `path` names a unit of a streaming source (DataSplit):
  // its records are read, shuffled and converted as stream_batches.h says,
  // ceil((end - begin) / batch) steps of up to a batch each (a step short
  // of records, as when corrupt ones were skipped, trains on fewer and
  // still pushes); its global steps are epoch x epoch_steps + first_step +
  // its own. corrupt_records / first_corrupt report the skipped records.
  // A TRAIN closure with a `replica` (strategy: central_storage) steps a
  // global_batch at a time (global steps then count global batches), trains
  // on the replica's slice of each and pushes it as the replica's share of
  // the step (UpdateKey.sync) to every PS holding a variable; each next
  // step's pull is answered once every replica's share is in and the step
  // applied. INVALID_ARGUMENT: a replica outside [0, replicas). EVAL of a
  // sigmoid model also returns the probability histograms (kAucBuckets
  // each). PREDICT runs the model forward as EVAL does over the split of
  // the eval data (in file order) and returns the last layer's outputs of
  // exactly the split's rows (RunClosureResponse.predictions, first_row);
  // labels are read with the data but not used. NOOP returns OK at once
  // with an empty response, touching neither data nor PS.
  absl::Status RunClosure(const RunClosureRequest& request, RunClosureResponse* response);

  const std::string& backend_name() const { return backend_name_; }
  int64_t train_examples() const { return train_.count; }
  int64_t eval_examples() const { return eval_.count; }

 private:
  // A closure's step buffers, lent with its devices by the DevicePool and
  // reused by the next closure (their allocations, and the bytes ReadPull and
  // BuildPush swap with the requests and answers, are kept).
  struct StepBuffers {
    std::vector<Tensor> params;
    std::vector<Tensor> grads;
    ModelBatch batch;
    // Per categorical feature: the batch's ids and their unique values.
    std::vector<std::vector<uint64_t>> ids;
    std::vector<std::vector<uint64_t>> unique_ids;
    RoutedStep step;
    std::vector<PullResponse> pulled;
    std::vector<PushRequest> push;
    std::vector<PushResponse> pushed;
    std::vector<Tensor> rows;       // per feature [unique, dim]
    std::vector<Tensor> row_grads;  // per feature [unique, dim]
    std::vector<float> predictions;  // PREDICT: a step's outputs
    // The largest staleness the PS measured for the last push
    // (PushResponse.staleness).
    int64_t push_staleness = 0;
  };
  using Pool = DevicePool<StepBuffers>;
  // What the steps of one running closure share (trainer.cc).
  struct ClosureRun;

  Trainer() = default;

  // RunClosure's pipeline: StartClosure, then RunSteps, each step
  // GatherAndPull (unless the previous push brought its pull), then
  // TrainAndPush or Evaluate.
  //
  // Checks the request's split and replica (INVALID_ARGUMENT) and borrows a
  // workspace from the pool (its errors as DevicePool::Acquire).
  absl::StatusOr<ClosureRun> StartClosure(const RunClosureRequest& request);
  // Runs the closure's steps in order, adding each to `response`; stops at
  // the first error.
  absl::Status RunSteps(ClosureRun* run, RunClosureResponse* response);
  // Gathers the examples of the step [begin, end) (this replica's slice),
  // plans its pull and pulls.
  absl::Status GatherAndPull(ClosureRun* run, int64_t begin, int64_t end);
  // Trains the gathered step [begin, end) and pushes its gradients, with
  // the next step's pull when it could be planned (PlanNextStep).
  absl::Status TrainAndPush(ClosureRun* run, int64_t begin, int64_t end, StepResult* step);
  // Gathers and plans the step after the one ending at `end`, if the split
  // has one: run->pulled_with_push says whether its pull can ride on this
  // step's push, run->next_plan holds a failed plan.
  void PlanNextStep(ClosureRun* run, int64_t end) const;
  // Evaluates the gathered step [begin, end).
  absl::Status Evaluate(ClosureRun* run, int64_t begin, int64_t end, StepResult* step) const;
  // PREDICT: runs the gathered step [begin, end) forward in inference form
  // (Model::Predict) and appends its outputs to `predictions` (float32
  // [rows so far, outputs]). ABORTED for a non-finite output, naming the row.
  absl::Status PredictStep(ClosureRun* run, int64_t begin, int64_t end, StepResult* step,
                           TensorProto* predictions) const;

  // One pull per PS for the planned step, then the rows and (if planned)
  // dense variables into buffers->rows / buffers->params.
  absl::Status Pull(StepBuffers* buffers, const RunClosureRequest& closure);
  // One push per PS with the step's gradients (built by the caller with
  // BuildPush), keyed (closure's id, step_index) with the closure's lease and
  // the step's `global_step` (for learning-rate schedules). If
  // `with_next_pull`, each push also carries buffers->step.pull (the next
  // step's, already planned), and its answers are read into buffers->params /
  // buffers->rows as Pull does.
  // `sync_examples` >= 0: the push is the closure's replica's share of a
  // synchronous step over that many examples (UpdateKey.sync), sent to
  // every PS holding a variable of the job.
  absl::Status Push(StepBuffers* buffers, const RunClosureRequest& closure, int64_t step_index,
                    int64_t global_step, bool with_next_pull, int64_t sync_examples = -1);
  // Forward and backward of the step in buffers->batch into buffers->grads
  // and buffers->row_grads: on devices->backend, or with devices > 1 split
  // into per_replica_batch slices trained on one thread and backend each,
  // their gradients averaged weighted by examples (the one-device step over
  // the whole batch, up to rounding).
  void TrainStep(Devices* devices, StepBuffers* buffers, StepResult* step) const;
  // The examples of the step slice [lo, hi) into the batch buffers: from
  // the data set in memory, or the closure's stream's next hi - lo (fewer
  // at its end). Errors: the stream's (stream_batches.h).
  absl::Status GatherStep(ClosureRun* run, int64_t lo, int64_t hi) const;
  // Copies examples order[begin, end) into the batch buffers and dedupes
  // each feature's ids.
  void Gather(const Dataset& data, const std::vector<int64_t>& order, int64_t begin, int64_t end,
              StepBuffers* buffers) const;
  // The training order of `epoch`, computed once and cached for recent epochs.
  std::shared_ptr<const std::vector<int64_t>> Order(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);

  JobSpec spec_;
  std::unique_ptr<Model> model_;
  Dataset train_;
  Dataset eval_;
  // Streaming sources (data.*.stream): their rows' conversion; nullopt for
  // a source in memory.
  std::optional<RowEncoder> train_stream_;
  std::optional<RowEncoder> eval_stream_;
  std::vector<int64_t> eval_order_;
  std::vector<std::unique_ptr<PsClient>> ps_;
  std::string job_;  // the job's namespace on every PS
  std::unique_ptr<ParamRouter> router_;
  // By PS index: the placement gives it at least one variable.
  std::vector<bool> ps_holds_variables_;
  std::string backend_name_;
  // Lends each running closure its devices and step buffers.
  std::unique_ptr<Pool> pool_;

  absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_TRAINER_H_
