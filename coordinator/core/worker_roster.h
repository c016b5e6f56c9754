// WorkerRoster: the coordinator's workers, which may change while a job runs
// (elastic workers, docs/elastic_workers.md). It starts with the cluster's
// workers (the cluster file, --workers, TF_CONFIG) at indices 0..n-1; a
// worker that registers (Coordinator.RegisterWorker) is appended, and one
// that leaves (Coordinator.LeaveCluster, on its SIGTERM) is marked so. Indices
// never move and entries are never removed: a worker that leaves and comes
// back at the same address gets its old index (and client) again. So the
// index is the same everywhere (health checks, a job's dispatch threads).
//
// Leaving is a handshake with the dispatch threads: every closure call to a
// worker is bracketed by BeginCall/EndCall; Leave() first makes BeginCall
// refuse (no new call starts), then waits until the calls in flight ended,
// so the worker exits with nothing in flight and nothing is retried.
//
// Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_WORKER_ROSTER_H_
#define PSCLUSTER_COORDINATOR_CORE_WORKER_ROSTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/core/worker_client.h"

namespace pscluster {

class WorkerRoster {
 public:
  struct Options {
    // Checks that a worker answers at `address` before it joins (the gRPC
    // wiring pings it); an error refuses the join with it. Null: no check.
    std::function<absl::Status(const std::string& address)> probe;
    // Makes the client of a new worker at roster index `index` (the wiring
    // also adds it to the health checks under that index). Called under the
    // roster's lock, in index order. Required for Join.
    std::function<std::unique_ptr<WorkerClient>(const std::string& address, int index)> connect;
  };

  // `initial` (not owned; must outlive the roster) are indices 0..n-1.
  WorkerRoster(std::vector<WorkerClient*> initial, Options options);

  // A worker joins at `address` (host:port). Returns its index: a new one,
  // or its old one when it left before. INVALID_ARGUMENT for a malformed
  // address, the probe's error when it does not answer, ALREADY_EXISTS when
  // it is a member now.
  absl::StatusOr<int> Join(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);

  // The worker at `address` leaves: no new call to it starts (but those
  // expected of it, ExpectCalls), then waits up to `wait` for its calls in
  // flight and expected to end. Returns the calls still in flight or
  // expected (0: none). NOT_FOUND for an address that is not a member.
  absl::StatusOr<int> Leave(const std::string& address, absl::Duration wait)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Entries so far (members and workers that left); indices < size() are valid.
  int size() const ABSL_LOCKS_EXCLUDED(mu_);
  // The client of index `i` (valid for the roster's life).
  WorkerClient* client(int i) const ABSL_LOCKS_EXCLUDED(mu_);
  // A member: joined (or initial) and not leaving.
  bool active(int i) const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<int> ActiveIndices() const ABSL_LOCKS_EXCLUDED(mu_);
  int active_count() const ABSL_LOCKS_EXCLUDED(mu_);
  // Bumped by every join and leave.
  int64_t version() const ABSL_LOCKS_EXCLUDED(mu_);

  // Brackets a closure call to worker `i`: false (and nothing to end) when it
  // is not a member, e.g. it is leaving, unless a call is expected of it
  // (ExpectCalls; the call uses one up).
  bool BeginCall(int i) ABSL_LOCKS_EXCLUDED(mu_);
  void EndCall(int i) ABSL_LOCKS_EXCLUDED(mu_);

  // Calls due to workers that only they can make (a multi_worker_mirrored
  // replica pinned to its ring member and queued, whose ring waits for it):
  // one more expected of each of `workers`, all or none. False (none) when
  // one of them is not a member. A worker that leaves may still start its
  // expected calls, and Leave waits for them as for calls in flight.
  bool ExpectCalls(const std::vector<int>& workers) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the expected calls of `workers` not made (their split ended).
  void ClearExpected(const std::vector<int>& workers) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    WorkerClient* client = nullptr;
    std::unique_ptr<WorkerClient> owned;
    std::string address;
    bool active = true;
    int in_flight = 0;
    int expected = 0;  // ExpectCalls not yet begun
  };
  int FindLocked(const std::string& address) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_WORKER_ROSTER_H_
