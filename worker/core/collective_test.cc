#include "worker/core/collective.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"
#include "worker/core/mirrored_ps_client.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Ring {
  explicit Ring(int n) : mailboxes(n) {
    std::vector<CollectiveMailbox*> boxes;
    for (auto& m : mailboxes) boxes.push_back(&m);
    peers = std::make_shared<InProcessPeers>(boxes);
  }
  RingContext Context(int r, int64_t step = 0) {
    RingContext c;
    c.peers = peers.get();
    c.mailbox = &mailboxes[r];
    c.job_id = "job";
    c.step = step;
    c.replica = r;
    c.replicas = static_cast<int>(mailboxes.size());
    c.lease = "lease";
    c.deadline = absl::Now() + absl::Seconds(20);
    return c;
  }
  std::vector<CollectiveMailbox> mailboxes;
  std::shared_ptr<InProcessPeers> peers;
};

TEST(RingAllReduceTest, SumsAndEveryReplicaGetsTheSameBits) {
  for (int replicas : {1, 2, 3, 4}) {
    for (size_t n : {size_t{1}, size_t{3}, size_t{10}, size_t{1000}}) {
      Ring ring(replicas);
      std::mt19937 rng(replicas * 100 + n);
      std::uniform_real_distribution<float> u(-1, 1);
      std::vector<std::vector<float>> data(replicas, std::vector<float>(n));
      std::vector<double> sum(n, 0.0);
      for (auto& d : data) {
        for (size_t i = 0; i < n; ++i) {
          d[i] = u(rng);
          sum[i] += d[i];
        }
      }
      std::vector<absl::Status> status(replicas);
      std::vector<std::thread> threads;
      for (int r = 0; r < replicas; ++r) {
        threads.emplace_back(
            [&, r] { status[r] = RingAllReduce(ring.Context(r), 0, absl::MakeSpan(data[r])); });
      }
      for (auto& t : threads) t.join();
      for (int r = 0; r < replicas; ++r) {
        ASSERT_TRUE(status[r].ok()) << status[r];
        ASSERT_EQ(std::memcmp(data[r].data(), data[0].data(), n * sizeof(float)), 0)
            << "replica " << r << " of " << replicas << ", n " << n;
      }
      for (size_t i = 0; i < n; ++i) EXPECT_NEAR(data[0][i], sum[i], 1e-5);
      for (auto& m : ring.mailboxes) EXPECT_EQ(m.held_bytes(), 0);
    }
  }
}

TEST(RingAllGatherTest, EveryReplicaGetsEveryBlob) {
  Ring ring(3);
  std::vector<absl::StatusOr<std::vector<std::string>>> out(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back(
        [&, r] { out[r] = RingAllGather(ring.Context(r), std::string(r + 1, 'a' + r)); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(out[r].ok()) << out[r].status();
    EXPECT_THAT(*out[r], ElementsAre("a", "bb", "ccc"));
  }
}

TEST(RingAllReduceTest, AMissingReplicaIsNamedAfterTheDeadline) {
  Ring ring(3);
  std::vector<float> data(9, 1.0f);
  RingContext c = ring.Context(1);
  c.deadline = absl::Now() + absl::Milliseconds(200);
  absl::Status s = RingAllReduce(c, 0, absl::MakeSpan(data));
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("replica 0 sent nothing"));
}

TEST(RingAllReduceTest, ChunksOfAnotherLeaseAreRefused) {
  Ring ring(2);
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  absl::Status sa, sb;
  std::thread t([&] {
    RingContext c = ring.Context(0);
    c.lease = "stranger";
    c.deadline = absl::Now() + absl::Seconds(2);
    sa = RingAllReduce(c, 0, absl::MakeSpan(a));
  });
  RingContext c = ring.Context(1);
  c.deadline = absl::Now() + absl::Seconds(2);
  sb = RingAllReduce(c, 0, absl::MakeSpan(b));
  t.join();
  EXPECT_TRUE(absl::IsInternal(sb)) << sb;
  EXPECT_THAT(sb.message(), HasSubstr("lease"));
}

TEST(CollectiveMailboxTest, FullMailboxRefusesAndOldChunksGo) {
  CollectiveMailbox box(/*max_bytes=*/10, /*max_age=*/absl::Milliseconds(50));
  CollectiveChunk c;
  c.set_data(std::string(8, 'x'));
  ASSERT_TRUE(box.Deliver(c).ok());
  c.set_step(1);
  EXPECT_TRUE(absl::IsResourceExhausted(box.Deliver(c)));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(box.Deliver(c).ok());  // the first one aged out
  EXPECT_EQ(box.held_bytes(), 8);
}

// Two replicas, each with its own copy in a JobStores, pushing shares of
// one step through MirroredPsClient: both copies apply the same weighted
// mean, dense and by row.
TEST(MirroredPsClientTest, ReplicasApplyTheSameMeanUpdate) {
  Ring ring(2);
  std::vector<std::unique_ptr<JobStores>> stores;
  std::vector<std::unique_ptr<MirroredPsClient>> clients;
  for (int r = 0; r < 2; ++r) {
    stores.push_back(std::make_unique<JobStores>());
    MirroredPsClient::Options o;
    o.job_id = "job";
    o.collective_timeout = absl::Seconds(20);
    o.bucket_elements = 3;  // several buckets
    clients.push_back(
        std::make_unique<MirroredPsClient>(std::make_unique<InProcessPsClient>(stores.back().get()),
                                           &ring.mailboxes[r], ring.peers, o));
    CreateVariablesRequest create;
    create.set_job("job");
    for (auto [name, shape] : {std::pair<std::string, Shape>{"w", {5}}, {"emb", {4, 2}}}) {
      VariableSpecProto* v = create.add_variables();
      v->set_name(name);
      v->set_dtype(DT_FLOAT32);
      v->mutable_shape()->Assign(shape.begin(), shape.end());
      v->mutable_initializer()->set_type("constant");
      v->mutable_initializer()->set_value(1.0f);
      v->mutable_optimizer()->set_type("sgd");
      v->mutable_optimizer()->set_learning_rate(1.0f);
    }
    CreateVariablesResponse created;
    ASSERT_TRUE(clients.back()->CreateVariables(create, &created).ok());
  }
  auto share = [](int r, int64_t examples, float g, std::vector<uint64_t> ids) {
    PushRequest p;
    p.set_job("job");
    UpdateKey* k = p.mutable_update();
    k->set_closure_id(3);
    k->set_step(0);
    k->mutable_sync()->set_replica(r);
    k->mutable_sync()->set_replicas(2);
    k->mutable_sync()->set_examples(examples);
    NamedTensor* t = p.add_gradients();
    t->set_name("w");
    EncodeTensor({5}, std::vector<float>(5, g), t->mutable_tensor());
    if (!ids.empty()) {
      SparseGradient* s = p.add_sparse();
      s->set_name("emb");
      std::string bytes(ids.size() * 8, '\0');
      std::memcpy(bytes.data(), ids.data(), bytes.size());
      s->set_ids(bytes);
      EncodeTensor({static_cast<int64_t>(ids.size()), 2}, std::vector<float>(ids.size() * 2, g),
                   s->mutable_rows());
    }
    p.mutable_pull()->add_names("w");
    return p;
  };
  std::vector<absl::Status> status(2);
  std::vector<PushResponse> responses(2);
  std::thread t([&] { status[1] = clients[1]->Push(share(1, 1, 5.0f, {}), &responses[1]); });
  status[0] = clients[0]->Push(share(0, 3, 1.0f, {1, 2}), &responses[0]);
  t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    // (3 * 1 + 1 * 5) / 4 = 2; lr 1.
    EXPECT_THAT(DecodeTensor(responses[r].pulled().tensors(0).tensor())->ToVector(),
                ElementsAre(-1, -1, -1, -1, -1));
    PullRequest pull;
    pull.set_job("job");
    pull.add_names("emb");
    PullResponse emb;
    ASSERT_TRUE(clients[r]->Pull(pull, &emb).ok());
    // Rows 1 and 2 got 3 * 1 / 4 (replica 1 had no rows).
    EXPECT_THAT(DecodeTensor(emb.tensors(0).tensor())->ToVector(),
                ElementsAre(1, 1, 0.25, 0.25, 0.25, 0.25, 1, 1));
  }
  // A push that is not a share would split the copies.
  PushRequest plain = share(0, 1, 1.0f, {});
  plain.mutable_update()->clear_sync();
  PushResponse r;
  EXPECT_TRUE(absl::IsInvalidArgument(clients[0]->Push(plain, &r)));
}

}  // namespace
}  // namespace pscluster
