// CheckpointPolicy: when a job's next checkpoint is due, and what a failed
// one means (checkpoint.every_steps / every_seconds / max_retries /
// retry_backoff_s / on_failure of the job spec).
//
// A checkpoint is due when `every_steps` steps were done since the last
// one, or `every_seconds` passed, unless a retry's backoff still runs or
// checkpoints were given up. A failed attempt (Failed) waits out a backoff
// (retry_backoff_s doubled per retry, at most 2^20 times) and the next
// trigger, so training goes on in between. A failure of the storage uses up
// one of `max_retries` retries; one more and the job gives up checkpoints
// (on_failure: continue) or fails (on_failure: fail). A PS failure uses up
// none: PS recovery takes over. Each kind of failure (its code and the errno
// text that ends its message) is reported once, its repeats as counts at
// most every 30 s, and once more when the job gives up.
//
// It only decides: taking checkpoints, the job's status and its events are
// the caller's (JobRunner). Time comes from the injected clock.
//
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_CHECKPOINT_POLICY_H_
#define PSCLUSTER_COORDINATOR_CORE_CHECKPOINT_POLICY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_spec.h"

namespace pscluster {

class CheckpointPolicy {
 public:
  // What one failed checkpoint attempt means.
  struct Failure {
    // Retries used up: the job fails (on_failure: fail) or goes on without
    // checkpoints (on_failure: continue; then `disabled` too).
    bool give_up = false;
    bool disabled = false;
    // Failed storage attempts in a row, this one included.
    int64_t attempt = 0;
    // The wait before the next attempt.
    absl::Duration backoff;
    // The event to record ("checkpoint_failed"); empty: a repeat that is
    // only counted for now.
    std::string report;
  };

  // The last checkpoint counts as taken now, at step 0.
  explicit CheckpointPolicy(CheckpointSpec spec,
                            std::function<absl::Time()> now = [] { return absl::Now(); });

  // Restarts the time trigger from now (the job starts running).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);

  // A checkpoint is due at `steps` (the job's steps done): its trigger
  // fired (every_steps steps, or every_seconds and at least one step since
  // the last checkpoint), no retry backoff runs and checkpoints are not
  // disabled.
  bool Due(int64_t steps) const ABSL_LOCKS_EXCLUDED(mu_);

  // A checkpoint at `step` was committed: the triggers count from it, the
  // retries and backoff are over.
  void Committed(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // The job's state was restored to a checkpoint at `step`: the triggers
  // count from it.
  void Restored(int64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // The PS failure that failed a checkpoint is healed: the next one is due
  // by its trigger again, without waiting out the backoff.
  void ClearBackoff() ABSL_LOCKS_EXCLUDED(mu_);

  // Records failed attempt `error` at `steps` (the job's steps done; the
  // next attempt also waits for the trigger from there). `ps_failure`: a
  // PS failed, not the storage.
  Failure Failed(const absl::Status& error, bool ps_failure, int64_t steps)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Checkpoints were given up (on_failure: continue).
  bool disabled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct FailureKind {
    int64_t unlogged = 0;  // repeats since its last report
    absl::Time logged;     // when that report was
  };

  const CheckpointSpec spec_;
  const std::function<absl::Time()> now_;

  mutable absl::Mutex mu_;
  int64_t steps_at_checkpoint_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_checkpoint_time_ ABSL_GUARDED_BY(mu_);
  // Failed storage attempts since the last success; no attempt before
  // next_attempt_.
  int64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool disabled_ ABSL_GUARDED_BY(mu_) = false;
  // By kind of failure ("CODE: errno text").
  std::map<std::string, FailureKind> failure_kinds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_CHECKPOINT_POLICY_H_
