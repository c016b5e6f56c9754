// SyncSteps: the synchronous steps of one job on one PS (strategy:
// central_storage, TF's CentralStorageStrategy / a bulk-synchronous PS).
//
// Every replica pushes its share of step (closure_id, step) with
// UpdateKey.sync = {replica, replicas, examples}: its gradients, each the
// mean over its `examples` examples. The PS keeps the shares of the step
// until all `replicas` have pushed, then applies their example-weighted mean
//   g = sum_r(examples_r * g_r) / sum_r(examples_r)
// once, through VariableStore::Push under the step's update key, so the step
// is the one-device step over the union of the replicas' examples (dense
// gradients and embedding rows alike: a row only some replicas touched gets
// the others' zero). The apply is exactly-once like any keyed push.
//
// A share's fused pull (PushRequest.pull, the replica's next step) is
// answered only after the step is applied: that wait is the barrier that
// makes training synchronous, and it parks the call, not a thread — `done`
// runs later, on the thread of the share that completes the step.
//
// Retries: a share of a step already applied is a duplicate (its pull is
// answered at once); a second share of the same replica for a pending step
// adds nothing and waits with the first. So a replica that died mid-step and
// is re-run anywhere completes the step exactly once, whichever of its pushes
// arrives.
//
// Waits are bounded: a share waiting longer than `wait_timeout` (a replica
// that never comes) is answered ABORTED naming the replicas missing, and the
// step's shares are kept for the retry. Reset() (a restore, the job's end)
// answers every waiter ABORTED and forgets every pending step.
//
// Thread-safe.
#ifndef PSCLUSTER_PS_CORE_SYNC_STEPS_H_
#define PSCLUSTER_PS_CORE_SYNC_STEPS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/gradient_sum.h"
#include "protos/ps.pb.h"
#include "ps/core/variable_store.h"

namespace pscluster {

class SyncSteps {
 public:
  using Done = absl::AnyInvocable<void(absl::Status)>;

  // Steps pending at once per job (only one in a healthy run: a replica
  // cannot pull step k+1 before step k is applied); more is refused.
  static constexpr int kMaxPendingSteps = 8;

  // `store` is the job's store (not owned; outlives this).
  SyncSteps(VariableStore* store, absl::Duration wait_timeout);
  ~SyncSteps();  // answers every waiter ABORTED

  SyncSteps(const SyncSteps&) = delete;
  SyncSteps& operator=(const SyncSteps&) = delete;

  // Takes one replica's share (`request.update().sync()` set; the lease was
  // checked by the caller). `done` is called exactly once, here or later:
  // at once with an error (INVALID_ARGUMENT: a bad share — replica outside
  // [0, replicas), replicas < 1 or not the step's count, examples < 0 (a
  // share of 0 examples counts its replica in; its gradients weigh nothing),
  // gradients Push would refuse; RESOURCE_EXHAUSTED: too many pending
  // steps), at once with OK for a share without a pull, and for a share
  // with a pull once the step is applied and `response->pulled` is filled
  // (or with the apply's or the pull's error, or ABORTED after the wait
  // timeout or a Reset). `response` must stay valid until `done` runs.
  void Push(const PushRequest& request, PushResponse* response, Done done);

  // Answers the waiters whose timeout passed by `now` (ABORTED).
  void Expire(absl::Time now);

  // Forgets every pending step, answering its waiters ABORTED with `why`.
  void Reset(const std::string& why);

  // Steps applied and waits that timed out, since construction.
  int64_t applied_steps() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t expired_waits() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    PullRequest pull;
    PushResponse* response;
    Done done;
    absl::Time deadline;
  };
  struct Step {
    int32_t replicas = 0;
    std::vector<bool> pushed;  // by replica
    int64_t examples = 0;
    int64_t global_step = -1;
    GradientSum sum;  // examples_r x each replica's gradients
    std::vector<Waiter> waiters;
  };
  using Key = std::pair<int64_t, int64_t>;  // (closure_id, step)
  using Answer = std::pair<Done, absl::Status>;

  // Adds the share to `step`. INVALID_ARGUMENT for a gradient whose size
  // differs from the step's other shares'.
  static absl::Status Add(const PushRequest& request, int64_t examples, Step* step);
  // Applies the completed `step` and answers its waiters into `answers`.
  void Apply(const Key& key, Step step, std::vector<Answer>* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  VariableStore* const store_;
  const absl::Duration wait_timeout_;
  mutable absl::Mutex mu_;
  std::map<Key, Step> pending_ ABSL_GUARDED_BY(mu_);
  int64_t applied_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expired_waits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_SYNC_STEPS_H_
