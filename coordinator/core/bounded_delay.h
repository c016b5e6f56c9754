// BoundedDelay: bounded staleness for an asynchronous phase's training
// closures — ps-lite's "bounded delay" consistency, stale-synchronous
// parallel (SSP) with closures as the clock (docs/staleness.md).
//
// Closures are numbered 0, 1, ... in the order they are queued (Add).
// Closure k may start only once every closure numbered below k - S has
// finished (S = max_staleness); equivalently k <= oldest unfinished + S.
// The staleness of a start is the number of closures numbered below it that
// have not finished then: at most S, by the rule. S = 0 runs the closures
// one after another; a retried closure keeps its number, and the oldest
// unfinished closure may always start, so the window never deadlocks: a
// closure of a lost worker holds the others back only until it is put back
// in the queue (it is then the one any worker may take).
//
// Not thread-safe: ClosureQueue calls it under its own lock.
#ifndef PSCLUSTER_COORDINATOR_CORE_BOUNDED_DELAY_H_
#define PSCLUSTER_COORDINATOR_CORE_BOUNDED_DELAY_H_

#include <cstdint>
#include <limits>
#include <set>

namespace pscluster {

class BoundedDelay {
 public:
  // No bound: every closure may start at once; staleness is still measured.
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

  // REQUIRES: max_staleness >= 0 (or kUnbounded).
  explicit BoundedDelay(int64_t max_staleness);

  int64_t max_staleness() const { return max_staleness_; }

  // A new closure: its number (0 first), unfinished until Finish.
  int64_t Add();
  // Whether closure `seq` may start now.
  bool MayStart(int64_t seq) const;
  // Closure `seq` starts (again, for a retry): returns its staleness, the
  // closures numbered below it still unfinished. REQUIRES: MayStart(seq).
  int64_t Start(int64_t seq);
  // Closure `seq` finished for good; later closures may start. Unknown or
  // repeated numbers are ignored.
  void Finish(int64_t seq);

  // The largest staleness any Start returned (0 before any).
  int64_t max_observed() const { return max_observed_; }
  // Closures added and not finished.
  int64_t unfinished() const { return static_cast<int64_t>(unfinished_.size()); }

 private:
  const int64_t max_staleness_;
  int64_t next_ = 0;
  std::set<int64_t> unfinished_;
  int64_t max_observed_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_BOUNDED_DELAY_H_
