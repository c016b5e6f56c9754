// JobSummaries: a job's TensorBoard scalars (the job's `summaries: {logdir,
// every_steps}`), written by the coordinator into one event file per run of
// the job (common/event_file_writer.h) in the job's logdir.
//
// Every scalar is at the job's global training step when it was written
// (the x axis TensorBoard shows), so that training, eval and checkpoints
// line up:
//   train/loss               mean training loss of the closures finished since
//   the
//                            previous point, every `every_steps` steps (at the
//                            end of the first closure that reaches a multiple)
//   train/learning_rate      the optimizer's rate at that step (its schedule
//   applied) train/examples_per_sec   the job's training throughput so far
//   epoch                    the epoch that just finished (1-based), and with
//   it: epoch/train_loss         the epoch's mean training loss
//   epoch/eval_loss, epoch/eval_accuracy, epoch/eval_auc (binary models only)
//   epoch/wall_seconds       the epoch's wall time, training and eval
//   ps/<i>/parameter_bytes, ps/<i>/slot_bytes   what PS i holds at the epoch's
//   end checkpoint/id, checkpoint/bytes              at each committed
//   checkpoint
// (train/learning_rate and train/examples_per_sec also come with each epoch.)
//
// Summaries never fail a job once it runs: a write that fails (disk full,
// the directory removed) is reported once through Options::on_error and
// turns the summaries off for the rest of the run.
//
// Thread-safe: the dispatch threads report closures while the job's thread
// reports epochs and checkpoints. It calls nothing of its callers under its
// lock but `on_error`, which must take no lock of theirs.
#ifndef PSCLUSTER_COORDINATOR_CORE_JOB_SUMMARIES_H_
#define PSCLUSTER_COORDINATOR_CORE_JOB_SUMMARIES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/event_file_writer.h"
#include "protos/coordinator.pb.h"
#include "protos/ps.pb.h"

namespace pscluster {

class JobSummaries {
 public:
  struct Options {
    // The directory of the event file, already confined to the checkpoint
    // root (common/job_paths.h, ResolveSummaryDir); created if missing.
    std::string logdir;
    // SummarySpec::every_steps: a train/loss point every this many steps;
    // 0: none between epochs.
    int64_t every_steps = 100;
    // The job's optimizer (resolved for its replicas): its learning rate.
    OptimizerProto optimizer;
    // The coordinator evaluates after each epoch (eval: inline): the epoch
    // scalars include epoch/eval_*. false (sidecar, none): they do not (the
    // sidecar evaluator writes its own under <logdir>/eval).
    bool inline_eval = true;
    // The clock of the events' wall times and of the file's name.
    std::function<absl::Time()> now = [] { return absl::Now(); };
    // Told, once, why the summaries stopped (the message names the file);
    // null: nobody is.
    std::function<void(const std::string&)> on_error;
  };

  // Opens the run's event file in options.logdir.
  // Errors of EventFileWriter::Create, naming the directory or the file.
  static absl::StatusOr<std::unique_ptr<JobSummaries>> Create(Options options);

  // A training closure finished: the job has done `steps` steps so far, the
  // closure trained on `examples` examples with summed loss `loss_sum`.
  // Closures of several workers may arrive out of step order.
  void TrainClosure(int64_t steps, int64_t examples, double loss_sum, double examples_per_sec)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The job rolled back to global step `steps` (a PS recovery): the
  // closures since the last point are dropped and the points go on from
  // there. REQUIRES: no closure in flight.
  void RolledBack(int64_t steps) ABSL_LOCKS_EXCLUDED(mu_);

  // Epoch `result.epoch()` (1-based) finished at global step `steps`; `ps`
  // is what each PS holds then (empty: unknown, no ps/ scalars).
  void EpochFinished(int64_t steps, const EpochResult& result, double examples_per_sec,
                     const std::vector<PsLoad>& ps) ABSL_LOCKS_EXCLUDED(mu_);

  // Checkpoint `checkpoint_id` of global step `step` committed, `bytes` in
  // all its files.
  void CheckpointCommitted(int64_t checkpoint_id, int64_t step, int64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The event file's path.
  const std::string& path() const { return path_; }

 private:
  JobSummaries(Options options, std::unique_ptr<EventFileWriter> writer);

  // The optimizer's rate at 0-based global step `step`.
  double LearningRate(int64_t step) const;
  // Writes one event; on failure reports it and stops every later write.
  void Write(int64_t step, const std::vector<std::pair<std::string, double>>& scalars)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const std::string path_;

  absl::Mutex mu_;
  // Null once a write failed.
  std::unique_ptr<EventFileWriter> writer_ ABSL_GUARDED_BY(mu_);
  // The closures since the last train/loss point.
  int64_t examples_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_sum_ ABSL_GUARDED_BY(mu_) = 0;
  // The step of the next train/loss point.
  int64_t next_point_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_JOB_SUMMARIES_H_
