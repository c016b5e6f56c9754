#include "worker/core/collective.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

constexpr int kReduceScatter = 0;
constexpr int kAllGather = 1;
constexpr int kGatherBlobs = 2;

int Mod(int a, int n) { return ((a % n) + n) % n; }

// Segment s of R over n elements: [begin, end).
std::pair<size_t, size_t> Segment(size_t n, int s, int replicas) {
  const size_t r = static_cast<size_t>(replicas);
  return {n * static_cast<size_t>(s) / r, n * static_cast<size_t>(s + 1) / r};
}

CollectiveChunk KeyFor(const RingContext& ctx, int bucket, int phase, int hop) {
  CollectiveChunk c;
  c.set_job_id(ctx.job_id);
  c.set_round(ctx.round);
  c.set_closure_id(ctx.closure_id);
  c.set_step(ctx.step);
  c.set_bucket(bucket);
  c.set_phase(phase);
  c.set_hop(hop);
  return c;
}

std::string What(const RingContext& ctx) {
  return absl::StrCat("all-reduce of step ", ctx.step, " of closure ", ctx.closure_id, " (job '",
                      ctx.job_id, "', round ", ctx.round, ")");
}

absl::Status SendNext(const RingContext& ctx, CollectiveChunk chunk) {
  chunk.set_from_replica(ctx.replica);
  chunk.set_lease(ctx.lease);
  chunk.set_layout(ctx.layout);
  const int next = Mod(ctx.replica + 1, ctx.replicas);
  absl::Status s = ctx.peers->Send(next, chunk);
  if (s.ok()) return s;
  return absl::Status(s.code(),
                      absl::StrCat(What(ctx), ": sending to replica ", next, ": ", s.message()));
}

absl::StatusOr<CollectiveChunk> TakePrevious(const RingContext& ctx, const CollectiveChunk& key) {
  const int previous = Mod(ctx.replica - 1, ctx.replicas);
  absl::StatusOr<CollectiveChunk> chunk = ctx.mailbox->Take(key, ctx.deadline);
  if (absl::IsDeadlineExceeded(chunk.status())) {
    return absl::AbortedError(absl::StrCat(What(ctx), ": replica ", previous,
                                           " sent nothing in time (hop ", key.hop(), " of phase ",
                                           key.phase(), ")"));
  }
  if (!chunk.ok()) return chunk.status();
  if (chunk->from_replica() != previous || chunk->lease() != ctx.lease ||
      chunk->layout() != ctx.layout) {
    return absl::InternalError(
        absl::StrCat(What(ctx), ": a chunk from replica ", chunk->from_replica(), " (expected ",
                     previous, ") does not match this replica's ",
                     chunk->lease() != ctx.lease ? "lease" : "variables (another model?)"));
  }
  return chunk;
}

}  // namespace

CollectiveMailbox::CollectiveMailbox(int64_t max_bytes, absl::Duration max_age)
    : max_bytes_(max_bytes), max_age_(max_age) {}

void CollectiveMailbox::Purge(absl::Time now) {
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    if (now - it->second.arrived > max_age_) {
      bytes_ -= static_cast<int64_t>(it->second.chunk.data().size());
      chunks_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::Status CollectiveMailbox::Deliver(CollectiveChunk chunk) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  const int64_t size = static_cast<int64_t>(chunk.data().size());
  if (bytes_ + size > max_bytes_) Purge(now);
  if (bytes_ + size > max_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("collective mailbox full: ", bytes_, " bytes held, limit ", max_bytes_));
  }
  Key key = KeyOf(chunk);
  auto it = chunks_.find(key);
  if (it != chunks_.end()) bytes_ -= static_cast<int64_t>(it->second.chunk.data().size());
  bytes_ += size;
  chunks_[std::move(key)] = Held{std::move(chunk), now};
  return absl::OkStatus();
}

absl::StatusOr<CollectiveChunk> CollectiveMailbox::Take(const CollectiveChunk& key,
                                                        absl::Time deadline) {
  const Key k = KeyOf(key);
  absl::MutexLock lock(&mu_);
  auto arrived = [this, &k]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return chunks_.contains(k); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&arrived), deadline)) {
    return absl::DeadlineExceededError("no chunk before the deadline");
  }
  auto it = chunks_.find(k);
  CollectiveChunk chunk = std::move(it->second.chunk);
  chunks_.erase(it);
  bytes_ -= static_cast<int64_t>(chunk.data().size());
  return chunk;
}

int64_t CollectiveMailbox::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

absl::Status RingAllReduce(const RingContext& ctx, int bucket, absl::Span<float> data) {
  const int R = ctx.replicas;
  if (R <= 1) return absl::OkStatus();
  const int r = ctx.replica;
  const size_t n = data.size();
  // Reduce-scatter: after R - 1 hops replica r holds the sum of segment r + 1.
  for (int hop = 0; hop < R - 1; ++hop) {
    const auto [sb, se] = Segment(n, Mod(r - hop, R), R);
    CollectiveChunk out = KeyFor(ctx, bucket, kReduceScatter, hop);
    out.set_data(reinterpret_cast<const char*>(data.data() + sb), (se - sb) * sizeof(float));
    RETURN_IF_ERROR(SendNext(ctx, std::move(out)));
    ASSIGN_OR_RETURN(CollectiveChunk in,
                     TakePrevious(ctx, KeyFor(ctx, bucket, kReduceScatter, hop)));
    const auto [rb, re] = Segment(n, Mod(r - hop - 1, R), R);
    if (in.data().size() != (re - rb) * sizeof(float)) {
      return absl::InternalError(absl::StrCat(What(ctx), ": a segment of ", in.data().size(),
                                              " bytes, expected ", (re - rb) * sizeof(float)));
    }
    for (size_t i = rb; i < re; ++i) {
      float v;
      std::memcpy(&v, in.data().data() + (i - rb) * sizeof(float), sizeof(float));
      data[i] += v;
    }
  }
  // All-gather: each finished segment travels once around the ring.
  for (int hop = 0; hop < R - 1; ++hop) {
    const auto [sb, se] = Segment(n, Mod(r + 1 - hop, R), R);
    CollectiveChunk out = KeyFor(ctx, bucket, kAllGather, hop);
    out.set_data(reinterpret_cast<const char*>(data.data() + sb), (se - sb) * sizeof(float));
    RETURN_IF_ERROR(SendNext(ctx, std::move(out)));
    ASSIGN_OR_RETURN(CollectiveChunk in, TakePrevious(ctx, KeyFor(ctx, bucket, kAllGather, hop)));
    const auto [rb, re] = Segment(n, Mod(r - hop, R), R);
    if (in.data().size() != (re - rb) * sizeof(float)) {
      return absl::InternalError(absl::StrCat(What(ctx), ": a segment of ", in.data().size(),
                                              " bytes, expected ", (re - rb) * sizeof(float)));
    }
    std::memcpy(data.data() + rb, in.data().data(), in.data().size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RingAllGather(const RingContext& ctx, std::string mine) {
  const int R = ctx.replicas;
  const int r = ctx.replica;
  std::vector<std::string> all(static_cast<size_t>(std::max(R, 1)));
  all[static_cast<size_t>(r)] = std::move(mine);
  for (int hop = 0; hop < R - 1; ++hop) {
    CollectiveChunk out = KeyFor(ctx, 0, kGatherBlobs, hop);
    out.set_data(all[static_cast<size_t>(Mod(r - hop, R))]);
    RETURN_IF_ERROR(SendNext(ctx, std::move(out)));
    ASSIGN_OR_RETURN(CollectiveChunk in, TakePrevious(ctx, KeyFor(ctx, 0, kGatherBlobs, hop)));
    all[static_cast<size_t>(Mod(r - hop - 1, R))] = std::move(*in.mutable_data());
  }
  return all;
}

}  // namespace pscluster
