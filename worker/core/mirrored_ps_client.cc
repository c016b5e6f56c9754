#include "worker/core/mirrored_ps_client.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/gradient_sum.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

}  // namespace

MirroredPsClient::MirroredPsClient(std::unique_ptr<PsClient> local, CollectiveMailbox* mailbox,
                                   std::shared_ptr<CollectivePeers> peers, Options options)
    : local_(std::move(local)),
      mailbox_(mailbox),
      peers_(std::move(peers)),
      options_(std::move(options)) {}

absl::Status MirroredPsClient::Push(const PushRequest& request, PushResponse* response) {
  if (!request.has_update() || !request.update().has_sync()) {
    return absl::InvalidArgumentError(
        "a multi_worker_mirrored replica takes only synchronous shares (UpdateKey.sync): an "
        "update applied on one replica alone would split the copies");
  }
  const UpdateKey& key = request.update();
  const SyncShare& share = key.sync();
  if (share.replicas() < 1 || share.replica() < 0 || share.replica() >= share.replicas() ||
      share.examples() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("replica ", share.replica(), " of ",
                                                   share.replicas(), " over ", share.examples(),
                                                   " examples is not a share"));
  }
  const float n = static_cast<float>(share.examples());

  // The fused dense buffer: every gradient scaled by n, then n and a flag.
  size_t total = 0;
  XXH64_state_t* layout_hash = XXH64_createState();
  XXH64_reset(layout_hash, 0);
  for (const NamedTensor& g : request.gradients()) {
    total += g.tensor().data().size() / sizeof(float);
    XXH64_update(layout_hash, g.name().data(), g.name().size());
    const uint64_t size = g.tensor().data().size();
    XXH64_update(layout_hash, &size, sizeof(size));
  }
  const uint64_t layout = XXH64_digest(layout_hash);
  XXH64_freeState(layout_hash);
  std::vector<float> fused(total + 2, 0.0f);
  size_t at = 0;
  for (const NamedTensor& g : request.gradients()) {
    const std::string& data = g.tensor().data();
    const size_t count = data.size() / sizeof(float);
    for (size_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, data.data() + i * sizeof(float), sizeof(float));
      fused[at + i] = n * v;
    }
    at += count;
  }
  fused[total] = n;
  fused[total + 1] = request.sparse_size() > 0 ? 1.0f : 0.0f;

  RingContext ctx;
  ctx.peers = peers_.get();
  ctx.mailbox = mailbox_;
  ctx.job_id = options_.job_id;
  ctx.round = share.round();
  ctx.closure_id = key.closure_id();
  ctx.step = key.step();
  ctx.replica = share.replica();
  ctx.replicas = share.replicas();
  ctx.lease = key.lease();
  ctx.layout = layout;
  ctx.deadline = absl::Now() + options_.collective_timeout;
  const size_t bucket = static_cast<size_t>(std::max<int64_t>(options_.bucket_elements, 1));
  for (size_t b = 0; b * bucket < fused.size(); ++b) {
    const size_t begin = b * bucket;
    const size_t len = std::min(bucket, fused.size() - begin);
    RETURN_IF_ERROR(
        RingAllReduce(ctx, static_cast<int>(b), absl::MakeSpan(fused.data() + begin, len)));
  }
  const float examples = fused[total];
  const bool rows = fused[total + 1] > 0;

  // Embedding rows: every replica's, summed by id in replica order.
  GradientSum rows_sum;
  if (rows) {
    PushRequest mine;
    for (const SparseGradient& g : request.sparse()) {
      SparseGradient* s = mine.add_sparse();
      s->set_name(g.name());
      s->set_ids(g.ids());
      *s->mutable_rows() = g.rows();
      const std::string& data = g.rows().data();
      s->mutable_rows()->set_data(GradientSum::FloatBytes(
          reinterpret_cast<const float*>(data.data()), data.size() / sizeof(float), n));
    }
    ASSIGN_OR_RETURN(std::vector<std::string> all, RingAllGather(ctx, mine.SerializeAsString()));
    for (size_t r = 0; r < all.size(); ++r) {
      PushRequest theirs;
      if (!theirs.ParseFromString(all[r])) {
        return absl::InternalError(absl::StrCat("replica ", r, " sent malformed embedding rows"));
      }
      for (const SparseGradient& g : theirs.sparse()) {
        if (absl::Status s = rows_sum.AddRows(g, 1.0f); !s.ok()) {
          return absl::InternalError(absl::StrCat("replica ", r, ": ", s.message()));
        }
      }
    }
  }

  // The step's mean gradient, applied to this copy under the step's key.
  PushRequest apply;
  apply.set_job(request.job());
  UpdateKey* u = apply.mutable_update();
  u->set_closure_id(key.closure_id());
  u->set_step(key.step());
  if (key.has_global_step()) u->set_global_step(key.global_step());
  u->set_lease(key.lease());
  u->set_lease_steps(key.lease_steps());
  if (examples > 0) {
    const float scale = 1.0f / examples;
    at = 0;
    for (const NamedTensor& g : request.gradients()) {
      const size_t count = g.tensor().data().size() / sizeof(float);
      NamedTensor* t = apply.add_gradients();
      t->set_name(g.name());
      TensorProto* tensor = t->mutable_tensor();
      tensor->set_dtype(g.tensor().dtype());
      *tensor->mutable_shape() = g.tensor().shape();
      tensor->set_data(GradientSum::FloatBytes(fused.data() + at, count, scale));
      at += count;
    }
    rows_sum.WriteTo(scale, &apply);
  }
  if (request.has_pull()) *apply.mutable_pull() = request.pull();
  return local_->Push(apply, response);
}

}  // namespace pscluster
