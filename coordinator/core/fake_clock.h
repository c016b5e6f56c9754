// Test helpers for code that takes an injectable clock: FakeClock, a clock
// that moves only when the test moves it, and WaitUntil, a bounded poll for
// an event another thread brings about.
#ifndef PSCLUSTER_COORDINATOR_CORE_FAKE_CLOCK_H_
#define PSCLUSTER_COORDINATOR_CORE_FAKE_CLOCK_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace pscluster {

// Moves only when told to, and counts how often it was read (a taker waiting
// on the locality wait reads it each time it looks).
class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    ++reads_;
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  int64_t reads() const {
    absl::MutexLock lock(&mu_);
    return reads_;
  }
  std::function<absl::Time()> AsFunction() {
    return [this] { return Now(); };
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::FromUnixSeconds(1'700'000'000);
  int64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
};

// Polls `event` every millisecond until it holds or `timeout` passes (a
// safety net only: the events waited on come within milliseconds); true if
// it held.
inline bool WaitUntil(const std::function<bool()>& event,
                      absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!event()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_FAKE_CLOCK_H_
