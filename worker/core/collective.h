// Collectives between the workers of a multi_worker_mirrored job: a ring
// all-reduce (reduce-scatter, then all-gather) of float buffers and a ring
// all-gather of byte strings, built on two small pieces:
//
// - CollectiveMailbox: a worker's inbox. The Collective.Deliver RPC (or an
//   in-process peer) puts each chunk there under its key; the worker's own
//   collective takes the chunk it expects next, waiting until a deadline.
// - CollectivePeers: how to send a chunk to replica i (gRPC in
//   worker/service, direct calls in process).
//
// Replica r sends only to replica (r + 1) mod R and receives only from
// (r - 1) mod R. Every hop's chunk carries (job, round, closure, step,
// bucket, phase, hop), so chunks of different steps, buckets or runs (a
// rolled-back round) never mix. The reduce-scatter sums each segment in ring
// order at one replica and the all-gather copies that sum to the others, so
// every replica ends with bitwise the same values — the replicas' variables
// stay identical.
//
// Thread-safe.
#ifndef PSCLUSTER_WORKER_CORE_COLLECTIVE_H_
#define PSCLUSTER_WORKER_CORE_COLLECTIVE_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "protos/worker.pb.h"

namespace pscluster {

class CollectiveMailbox {
 public:
  // Chunks held at most `max_bytes` in all (RESOURCE_EXHAUSTED past it) and
  // `max_age` each (then dropped: their collective gave up long ago).
  explicit CollectiveMailbox(int64_t max_bytes = int64_t{1} << 30,
                             absl::Duration max_age = absl::Minutes(2));

  // Files `chunk` under its key. A second chunk of the same key replaces
  // the first (a resent hop). RESOURCE_EXHAUSTED when the mailbox is full.
  absl::Status Deliver(CollectiveChunk chunk) ABSL_LOCKS_EXCLUDED(mu_);

  // Takes the chunk of `key` (as CollectiveChunk fields), waiting for it
  // until `deadline`: DEADLINE_EXCEEDED then.
  absl::StatusOr<CollectiveChunk> Take(const CollectiveChunk& key, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_);

  int64_t held_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::tuple<std::string, int64_t, int64_t, int64_t, int32_t, int32_t, int32_t>;
  static Key KeyOf(const CollectiveChunk& c) {
    return {c.job_id(), c.round(), c.closure_id(), c.step(), c.bucket(), c.phase(), c.hop()};
  }
  struct Held {
    CollectiveChunk chunk;
    absl::Time arrived;
  };
  void Purge(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_bytes_;
  const absl::Duration max_age_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Held> chunks_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

class CollectivePeers {
 public:
  virtual ~CollectivePeers() = default;
  // Delivers `chunk` into replica `replica`'s mailbox. UNAVAILABLE (naming
  // the replica) when it cannot be reached.
  virtual absl::Status Send(int replica, const CollectiveChunk& chunk) = 0;
};

// Peers in one process (tests, in-process clusters): replica i's mailbox is
// mailboxes[i] (not owned).
class InProcessPeers final : public CollectivePeers {
 public:
  explicit InProcessPeers(std::vector<CollectiveMailbox*> mailboxes)
      : mailboxes_(std::move(mailboxes)) {}
  absl::Status Send(int replica, const CollectiveChunk& chunk) override {
    if (replica < 0 || replica >= static_cast<int>(mailboxes_.size())) {
      return absl::UnavailableError("no such replica");
    }
    return mailboxes_[static_cast<size_t>(replica)]->Deliver(chunk);
  }

 private:
  std::vector<CollectiveMailbox*> mailboxes_;
};

// One step's collective: who this replica is, and the chunks' common key.
struct RingContext {
  CollectivePeers* peers = nullptr;
  CollectiveMailbox* mailbox = nullptr;
  std::string job_id;
  int64_t round = 0;
  int64_t closure_id = 0;
  int64_t step = 0;
  int replica = 0;
  int replicas = 1;
  std::string lease;
  uint64_t layout = 0;
  absl::Time deadline = absl::InfiniteFuture();
};

// Sums `data` over the replicas, in place (bucket `bucket` of the step).
// Every replica calls it with a buffer of the same size. ABORTED naming the
// replica waited for when a chunk does not come before the deadline;
// UNAVAILABLE when the next replica cannot be reached; INTERNAL when a
// chunk's size, lease or layout is not this replica's.
absl::Status RingAllReduce(const RingContext& ctx, int bucket, absl::Span<float> data);

// Every replica's `mine`, by replica index. Errors as RingAllReduce.
absl::StatusOr<std::vector<std::string>> RingAllGather(const RingContext& ctx, std::string mine);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_COLLECTIVE_H_
