// SidecarEvaluator: TF's SidecarEvaluator for pscluster. Watches a job's
// checkpoint directory, evaluates each new committed checkpoint, and records
// the result: TensorBoard scalars (eval/loss, eval/accuracy, eval/auc at the
// checkpoint's global step), Prometheus gauges, the best checkpoint by the
// job's eval.keep_best (best_checkpoint.h), and its own progress
// (evaluator_state.h), persisted after every checkpoint so that a restarted
// evaluator resumes where it stopped.
//
// Which checkpoint: each poll lists the committed checkpoints (a MANIFEST
// that parses and names its own id: CheckpointManager::List; a directory
// still being written has none and is never seen) and takes the NEWEST one
// past the last evaluated. Older unevaluated ones are passed over, as TF's
// evaluator skips to the latest checkpoint: after a restart, or when
// training checkpoints faster than the evaluator evaluates, the evaluator
// catches up at once instead of falling further behind. Before evaluating,
// every data file the manifest names must exist with the manifest's size
// (the restore then checks each file's checksum).
//
// What can go wrong with a checkpoint:
// - it vanishes (the job's `checkpoint.keep` pruned it) before or during
//   the evaluation: skipped and logged, the state not advanced; the next
//   poll takes the newest again at once;
// - it is damaged (a file missing or of the wrong size while its MANIFEST is
//   there, or the restore refuses it with DATA_LOSS / FAILED_PRECONDITION /
//   INVALID_ARGUMENT): skipped, logged, and the state advanced past it
//   (committed checkpoints never change, so it would fail again);
// - any other error (e.g. the file system unavailable) is returned; Run logs
//   it and tries again at the next poll.
// A best/ that cannot be replaced (e.g. disk full) is logged (and in the
// poll's `problem`) and the checkpoint recorded as evaluated all the same:
// its metrics are out, and best/ stays the previous best.
//
// Exactly-once: the state is written after the checkpoint's results, so a
// crash between the two evaluates that checkpoint again after the restart
// (its TensorBoard point is then written twice at the same step); otherwise
// no checkpoint is evaluated twice across restarts.
//
// No RPC, no threads of its own: the evaluation itself is a callback
// (evaluator/checkpoint_eval.h restores into in-process PS stores and runs
// worker/core's eval), and the clock and the wait between polls are
// injected. Thread-compatible: one thread drives it.
#ifndef PSCLUSTER_EVALUATOR_CORE_SIDECAR_EVALUATOR_H_
#define PSCLUSTER_EVALUATOR_CORE_SIDECAR_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/event_file_writer.h"
#include "common/job_spec.h"
#include "evaluator/core/evaluator_state.h"
#include "protos/checkpoint.pb.h"

namespace prometheus {
class Counter;
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace pscluster {

// The eval metrics of one checkpoint over the job's data.eval.
struct EvalMetrics {
  int64_t examples = 0;
  double loss = 0;       // mean loss per example (with the model's L2)
  double accuracy = 0;   // correct / examples
  bool has_auc = false;  // binary (sigmoid) models
  double auc = 0;
};

// What one poll of a SidecarEvaluator did.
enum class SidecarOutcome {
  kIdle,       // nothing committed past the last evaluated checkpoint
  kEvaluated,  // `checkpoint_id` evaluated and recorded
  kVanished,   // it vanished before or while it was evaluated: not recorded
  kDamaged,    // it does not restore: passed over, state advanced
};
struct SidecarPollResult {
  SidecarOutcome outcome = SidecarOutcome::kIdle;
  int64_t checkpoint_id = -1;
  int64_t step = 0;
  EvalMetrics metrics;
  // Older unevaluated checkpoints passed over for the newest.
  int64_t passed_over = 0;
  bool new_best = false;
  // kVanished, kDamaged: why; kEvaluated: why best/ was not updated, if so.
  std::string problem;
};

class SidecarEvaluator {
 public:
  // Committed checkpoints, newest first (CheckpointManager::List).
  using ListFn = std::function<std::vector<CheckpointManifest>()>;
  // Evaluates one committed checkpoint. Error codes as the class comment
  // says (NOT_FOUND / DATA_LOSS / FAILED_PRECONDITION / INVALID_ARGUMENT:
  // the checkpoint; others: try again later).
  using EvaluateFn = std::function<absl::StatusOr<EvalMetrics>(const CheckpointManifest&)>;

  struct Options {
    // The job's checkpoint directory: ckpt-<id>/ are read, evaluator/state
    // and best/ written.
    std::string checkpoint_dir;
    ListFn list;
    EvaluateFn evaluate;
    // keep_best (EvalSpec::keep_best, metric, maximize); the mode is not used.
    EvalSpec eval;
    // Directory of the TensorBoard event file (created on first use); empty:
    // no summaries.
    std::string summary_dir;
    // Gauges and counters pscluster_evaluator_* (README "Metrics"); null:
    // none.
    std::shared_ptr<prometheus::Registry> registry;
    std::function<absl::Time()> now = [] { return absl::Now(); };
    // Run's wait between polls that found nothing new; returns early when
    // the caller is stopping (e.g. on SIGTERM).
    std::function<void(absl::Duration)> sleep = [](absl::Duration d) { absl::SleepFor(d); };
    absl::Duration poll_interval = absl::Seconds(5);
    // Told by Run of every poll that found a checkpoint (not kIdle), after
    // it is recorded (e.g. to print it); null: nobody.
    std::function<void(const SidecarPollResult&)> on_poll;
  };

  // Loads the state from <checkpoint_dir>/evaluator/state (fresh without
  // one). INVALID_ARGUMENT for missing list/evaluate or an empty directory;
  // the state's load errors.
  static absl::StatusOr<std::unique_ptr<SidecarEvaluator>> Create(Options options);
  ~SidecarEvaluator();

  using Outcome = SidecarOutcome;
  using PollResult = SidecarPollResult;

  // One poll: lists, takes the newest unevaluated checkpoint, evaluates and
  // records it. Errors: the evaluation's transient ones, and failures to
  // persist the state (the checkpoint is then evaluated again next time).
  absl::StatusOr<PollResult> PollOnce();

  // Polls until `done()` holds at a poll that found nothing new (checked
  // before that poll's listing, so a checkpoint committed just before the
  // end is still evaluated), waiting options.poll_interval after each poll
  // that found nothing or failed. Returns OK then. Errors of single polls
  // are logged and retried; one that happens when `done()` already holds is
  // returned (nothing else would end the loop).
  absl::Status Run(const std::function<bool()>& done);

  const EvaluatorState& state() const { return state_; }

 private:
  explicit SidecarEvaluator(Options options, EvaluatorState state);
  // Every data file of `m` exists with its size: OK, NOT_FOUND (vanished),
  // or DATA_LOSS.
  absl::Status CheckFiles(const CheckpointManifest& m) const;
  bool ManifestExists(int64_t id) const;
  void WriteSummaries(const CheckpointManifest& m, const EvalMetrics& metrics);
  // Updates best/ and `next`'s best when `metrics` beat the best so far
  // (in `next`); true if they did. KeepBestCheckpoint's errors.
  absl::StatusOr<bool> UpdateBest(const CheckpointManifest& m, const EvalMetrics& metrics,
                                  EvaluatorState* next);

  const Options options_;
  const std::string state_path_;
  EvaluatorState state_;
  std::unique_ptr<EventFileWriter> events_;
  bool summaries_failed_ = false;
  // From options_.registry; null without one.
  prometheus::Family<prometheus::Gauge>* eval_family_ = nullptr;
  prometheus::Gauge* loss_gauge_ = nullptr;
  prometheus::Gauge* accuracy_gauge_ = nullptr;
  prometheus::Gauge* auc_gauge_ = nullptr;
  prometheus::Gauge* checkpoint_gauge_ = nullptr;
  prometheus::Gauge* step_gauge_ = nullptr;
  prometheus::Gauge* seconds_gauge_ = nullptr;
  prometheus::Gauge* best_gauge_ = nullptr;
  prometheus::Gauge* best_checkpoint_gauge_ = nullptr;
  prometheus::Counter* evaluations_ = nullptr;
  // pscluster_evaluator_skipped_total{reason}.
  prometheus::Counter* superseded_ = nullptr;
  prometheus::Counter* vanished_ = nullptr;
  prometheus::Counter* damaged_ = nullptr;
};

const char* OutcomeName(SidecarOutcome outcome);

}  // namespace pscluster

#endif  // PSCLUSTER_EVALUATOR_CORE_SIDECAR_EVALUATOR_H_
