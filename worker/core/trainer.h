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
// backend and scratch buffers from a pool.
#ifndef PSCLUSTER_WORKER_CORE_TRAINER_H_
#define PSCLUSTER_WORKER_CORE_TRAINER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/job_spec.h"
#include "common/ps_client.h"
#include "common/tensor.h"
#include "protos/worker.pb.h"
#include "worker/core/backend.h"
#include "worker/core/dataset.h"
#include "worker/core/model.h"
#include "worker/core/param_router.h"

namespace pscluster {

class Trainer {
 public:
  // Builds the trainer: loads the train and eval data named in `spec`,
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
  // A TRAIN closure with a `replica` (strategy: central_storage) steps a
  // global_batch at a time (global steps then count global batches), trains
  // on the replica's slice of each and pushes it as the replica's share of
  // the step (UpdateKey.sync) to every PS holding a variable; each next
  // step's pull is answered once every replica's share is in and the step
  // applied. INVALID_ARGUMENT: a replica outside [0, replicas). EVAL of a
  // sigmoid model also returns the probability histograms (kAucBuckets
  // each). NOOP returns OK at once with an empty response, touching neither
  // data nor PS.
  absl::Status RunClosure(const RunClosureRequest& request, RunClosureResponse* response);

  const std::string& backend_name() const { return backend_name_; }
  int64_t train_examples() const { return train_.count; }
  int64_t eval_examples() const { return eval_.count; }

 private:
  // One replica of a worker with several devices (JobSpec::devices): its
  // backend, scratch, slice of the step's batch and gradients.
  struct DeviceSlot {
    std::unique_ptr<Backend> backend;
    ModelScratch scratch;
    ModelBatch batch;
    std::vector<Tensor> grads;
    std::vector<Tensor> row_grads;
    StepResult result;
  };
  // Threads that run devices 1..n-1 of a step (device 0 runs on the
  // closure's own thread), started once per context, not per step.
  class DeviceThreads {
   public:
    explicit DeviceThreads(int threads);
    ~DeviceThreads();
    // Runs fn(0) here and fn(1) .. fn(n - 1) on the threads; returns when
    // all are done. REQUIRES: 1 <= n <= threads + 1.
    void Run(int n, const std::function<void(int)>& fn) ABSL_LOCKS_EXCLUDED(mu_);

   private:
    void Loop(int index) ABSL_LOCKS_EXCLUDED(mu_);
    absl::Mutex mu_;
    const std::function<void(int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
    int n_ ABSL_GUARDED_BY(mu_) = 0;
    int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
    int pending_ ABSL_GUARDED_BY(mu_) = 0;
    bool stop_ ABSL_GUARDED_BY(mu_) = false;
    std::vector<std::thread> threads_;
  };
  // What one running closure owns.
  struct Context {
    // devices > 1: one slot per device, and the threads of devices 1..
    std::vector<std::unique_ptr<DeviceSlot>> devices;
    std::unique_ptr<DeviceThreads> device_threads;
    std::unique_ptr<Backend> backend;
    ModelScratch scratch;
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
  };

  Trainer() = default;
  absl::StatusOr<std::unique_ptr<Context>> AcquireContext();
  void ReleaseContext(std::unique_ptr<Context> ctx);
  // One pull per PS for the planned step, then the rows and (if planned)
  // dense variables into ctx->rows / ctx->params.
  absl::Status Pull(Context* ctx, const RunClosureRequest& closure);
  // One push per PS with the step's gradients (built by the caller with
  // BuildPush), keyed (closure's id, step_index) with the closure's lease and
  // the step's `global_step` (for learning-rate schedules). If
  // `with_next_pull`, each push also carries ctx->step.pull (the next step's,
  // already planned), and its answers are read into ctx->params / ctx->rows
  // as Pull does.
  // `sync_examples` >= 0: the push is the closure's replica's share of a
  // synchronous step over that many examples (UpdateKey.sync), sent to
  // every PS holding a variable of the job.
  absl::Status Push(Context* ctx, const RunClosureRequest& closure, int64_t step_index,
                    int64_t global_step, bool with_next_pull, int64_t sync_examples = -1);
  // Forward and backward of the step in ctx->batch into ctx->grads and
  // ctx->row_grads: on the context's backend, or with devices > 1 split
  // into per_replica_batch slices trained on one thread and backend each,
  // their gradients averaged weighted by examples (the one-device step over
  // the whole batch, up to rounding).
  void TrainStep(Context* ctx, StepResult* step) const;
  // Copies examples order[begin, end) into the context's batch buffers and
  // dedupes each feature's ids.
  void Gather(const Dataset& data, const std::vector<int64_t>& order, int64_t begin, int64_t end,
              Context* ctx) const;
  // The training order of `epoch`, computed once and cached for recent epochs.
  std::shared_ptr<const std::vector<int64_t>> Order(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);

  JobSpec spec_;
  std::unique_ptr<Model> model_;
  Dataset train_;
  Dataset eval_;
  std::vector<int64_t> eval_order_;
  std::vector<std::unique_ptr<PsClient>> ps_;
  std::string job_;  // the job's namespace on every PS
  std::unique_ptr<ParamRouter> router_;
  // By PS index: the placement gives it at least one variable.
  std::vector<bool> ps_holds_variables_;
  std::string backend_name_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Context>> free_contexts_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_TRAINER_H_
