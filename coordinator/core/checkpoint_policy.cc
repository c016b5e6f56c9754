#include "coordinator/core/checkpoint_policy.h"

#include "absl/strings/str_cat.h"
#include "common/backoff.h"

namespace pscluster {

CheckpointPolicy::CheckpointPolicy(CheckpointSpec spec, std::function<absl::Time()> now)
    : spec_(std::move(spec)), now_(std::move(now)) {
  absl::MutexLock lock(&mu_);
  last_checkpoint_time_ = now_();
}

void CheckpointPolicy::Start() {
  absl::MutexLock lock(&mu_);
  last_checkpoint_time_ = now_();
}

bool CheckpointPolicy::Due(int64_t steps) const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  if (disabled_ || now < next_attempt_) return false;
  // The time trigger also needs a step since the last checkpoint: one of
  // the same step would hold nothing new, and when checkpoints take longer
  // than every_seconds, taking them back to back once an epoch's closures
  // are all done (nothing to dispatch between them) would never end.
  return (spec_.every_steps > 0 && steps - steps_at_checkpoint_ >= spec_.every_steps) ||
         (spec_.every_seconds > 0 && steps > steps_at_checkpoint_ &&
          now - last_checkpoint_time_ >= absl::Seconds(spec_.every_seconds));
}

void CheckpointPolicy::Committed(int64_t step) {
  absl::MutexLock lock(&mu_);
  steps_at_checkpoint_ = step;
  last_checkpoint_time_ = now_();
  retries_ = 0;
  next_attempt_ = absl::InfinitePast();
}

void CheckpointPolicy::Restored(int64_t step) {
  absl::MutexLock lock(&mu_);
  steps_at_checkpoint_ = step;
  last_checkpoint_time_ = now_();
}

void CheckpointPolicy::ClearBackoff() {
  absl::MutexLock lock(&mu_);
  next_attempt_ = absl::InfinitePast();
}

bool CheckpointPolicy::disabled() const {
  absl::MutexLock lock(&mu_);
  return disabled_;
}

CheckpointPolicy::Failure CheckpointPolicy::Failed(const absl::Status& error, bool ps_failure,
                                                   int64_t steps) {
  const std::string message(error.message());
  // The kind of a failure: its code and the errno text that ends its message.
  const size_t colon = message.rfind(": ");
  const std::string kind = absl::StrCat(
      absl::StatusCodeToString(error.code()), ": ",
      colon == std::string::npos ? message : message.substr(colon + 2));
  Failure f;
  bool first;
  int64_t repeats = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = now_();
    // A PS that is down or restarted is PS recovery's business: it does not
    // use up the storage's retries.
    if (!ps_failure) ++retries_;
    f.attempt = retries_;
    f.give_up = !ps_failure && retries_ > spec_.max_retries;
    if (f.give_up && spec_.on_failure == CheckpointSpec::OnFailure::kContinue) {
      disabled_ = true;
      f.disabled = true;
    }
    // The next attempt waits for the backoff and for the trigger to fire
    // again, so training always goes on in between.
    f.backoff = ExponentialBackoff{absl::Seconds(spec_.retry_backoff_s), 20}.Before(f.attempt);
    next_attempt_ = now + f.backoff;
    steps_at_checkpoint_ = steps;
    last_checkpoint_time_ = now;
    auto [it, inserted] = failure_kinds_.try_emplace(kind);
    first = inserted;
    if (first) {
      it->second.logged = now;
    } else if (f.give_up || now - it->second.logged >= absl::Seconds(30)) {
      repeats = it->second.unlogged + 1;
      it->second.unlogged = 0;
      it->second.logged = now;
    } else {
      ++it->second.unlogged;
    }
  }
  // One line per kind of failure, repeats as counts (at most every 30 s),
  // and one when giving up.
  if (f.give_up) {
    f.report = absl::StrCat("checkpoint failed ", f.attempt, " times in a row (", spec_.max_retries,
                            " retries): ", message, "; ",
                            spec_.on_failure == CheckpointSpec::OnFailure::kFail
                                ? "the job fails (checkpoint.on_failure: fail)"
                                : "training goes on without checkpoints (checkpoint.on_failure: "
                                  "continue)");
  } else if (first) {
    f.report = absl::StrCat(message, "; ",
                            ps_failure ? std::string("a PS failed: PS recovery takes over")
                                       : absl::StrCat("retry ", f.attempt, " of ",
                                                      spec_.max_retries, " after ",
                                                      absl::FormatDuration(f.backoff),
                                                      " and the next checkpoint trigger; training "
                                                      "goes on"));
  } else if (repeats > 0) {
    f.report = absl::StrCat("checkpoint failed ", repeats,
                            " more times since the last report: ", message);
  }
  return f;
}

}  // namespace pscluster
