#include "ps/core/sync_steps.h"

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kJob[] = "job";

VariableSpecProto Spec(const std::string& name, Shape shape) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("constant");
  spec.mutable_initializer()->set_value(1.0f);
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

class SyncStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CreateVariablesRequest req;
    req.set_job(kJob);
    *req.add_variables() = Spec("w", {2});
    *req.add_variables() = Spec("emb", {4, 2});
    CreateVariablesResponse resp;
    ASSERT_TRUE(jobs_.CreateVariables(req, &resp).ok());
  }

  // Replica `replica`'s share of (closure 7, `step`): gradient `g` for every
  // element of w, rows `rows` for embedding ids `ids`, over `examples`.
  static PushRequest Share(int replica, int replicas, int64_t examples, int64_t step, float g,
                           std::vector<uint64_t> ids = {}, bool pull = true) {
    PushRequest req;
    req.set_job(kJob);
    UpdateKey* key = req.mutable_update();
    key->set_closure_id(7);
    key->set_step(step);
    key->set_global_step(step);
    key->mutable_sync()->set_replica(replica);
    key->mutable_sync()->set_replicas(replicas);
    key->mutable_sync()->set_examples(examples);
    if (examples > 0) {
      NamedTensor* t = req.add_gradients();
      t->set_name("w");
      EncodeTensor({2}, std::vector<float>{g, 2 * g}, t->mutable_tensor());
      if (!ids.empty()) {
        SparseGradient* s = req.add_sparse();
        s->set_name("emb");
        std::string bytes(ids.size() * 8, '\0');
        std::memcpy(bytes.data(), ids.data(), bytes.size());
        s->set_ids(bytes);
        std::vector<float> rows(ids.size() * 2, g);
        EncodeTensor({static_cast<int64_t>(ids.size()), 2}, rows, s->mutable_rows());
      }
    }
    if (pull) req.mutable_pull()->add_names("w");
    return req;
  }

  std::vector<float> Read(const std::string& name) {
    PullRequest req;
    req.set_job(kJob);
    req.add_names(name);
    PullResponse resp;
    EXPECT_TRUE(jobs_.Pull(req, &resp).ok());
    return DecodeTensor(resp.tensors(0).tensor())->ToVector();
  }

  int64_t AppliedSteps() {
    StatsRequest req;
    req.set_job(kJob);
    StatsResponse resp;
    EXPECT_TRUE(jobs_.Stats(req, &resp).ok());
    return resp.applied_steps();
  }

  JobStores jobs_{VariableStore::Options(), absl::Milliseconds(300)};
};

// An answer that arrives later, on whichever thread.
struct Pending {
  absl::Notification done;
  absl::Status status;
  PushResponse response;
  SyncSteps::Done Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      done.Notify();
    };
  }
};

TEST_F(SyncStepsTest, AppliesTheExampleWeightedMeanOnceEveryReplicaPushed) {
  Pending a;
  jobs_.PushAsync(Share(0, 2, 3, 0, 1.0f, {1, 2}), &a.response, a.Callback());
  // Replica 1 has not pushed: nothing applied, replica 0's pull waits.
  EXPECT_FALSE(a.done.HasBeenNotified());
  EXPECT_THAT(Read("w"), ElementsAre(1.0f, 1.0f));
  Pending b;
  jobs_.PushAsync(Share(1, 2, 1, 0, 5.0f, {2, 3}), &b.response, b.Callback());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(b.done.HasBeenNotified());
  ASSERT_TRUE(a.status.ok()) << a.status;
  ASSERT_TRUE(b.status.ok()) << b.status;
  // g = (3 * 1 + 1 * 5) / 4 = 2 (and 4 for the second element); lr 1.
  EXPECT_THAT(Read("w"), ElementsAre(-1.0f, -3.0f));
  // Both pulls were answered after the apply.
  for (Pending* p : {&a, &b}) {
    EXPECT_THAT(DecodeTensor(p->response.pulled().tensors(0).tensor())->ToVector(),
                ElementsAre(-1.0f, -3.0f));
  }
  // Rows: id 1 only replica 0 (3 * 1 / 4), id 2 both ((3 + 5) / 4), id 3 only replica 1 (5 / 4).
  EXPECT_THAT(Read("emb"), ElementsAre(1.0f, 1.0f, 0.25f, 0.25f, -1.0f, -1.0f, -0.25f, -0.25f));
  EXPECT_EQ(AppliedSteps(), 1);
}

TEST_F(SyncStepsTest, RetriedSharesApplyOnce) {
  Pending a;
  jobs_.PushAsync(Share(0, 2, 1, 0, 1.0f), &a.response, a.Callback());
  // Replica 0 retried (its first attempt died waiting): adds nothing, waits.
  Pending again;
  jobs_.PushAsync(Share(0, 2, 1, 0, 100.0f), &again.response, again.Callback());
  EXPECT_FALSE(again.done.HasBeenNotified());
  PushResponse last;
  ASSERT_TRUE(jobs_.Push(Share(1, 2, 1, 0, 3.0f), &last).ok());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(again.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(again.response.duplicate());
  EXPECT_THAT(Read("w"), ElementsAre(-1.0f, -3.0f));  // mean 2: the 100 never counted
  // A share of the step after it was applied: a duplicate, answered at once.
  PushResponse late;
  ASSERT_TRUE(jobs_.Push(Share(1, 2, 1, 0, 50.0f), &late).ok());
  EXPECT_TRUE(late.duplicate());
  EXPECT_THAT(DecodeTensor(late.pulled().tensors(0).tensor())->ToVector(),
              ElementsAre(-1.0f, -3.0f));
  EXPECT_EQ(AppliedSteps(), 1);
}

TEST_F(SyncStepsTest, AnEmptyShareCountsWithoutGradients) {
  PushResponse r0;
  Pending a;
  jobs_.PushAsync(Share(0, 2, 2, 0, 1.0f), &a.response, a.Callback());
  ASSERT_TRUE(jobs_.Push(Share(1, 2, 0, 0, 0.0f), &r0).ok());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(Read("w"), ElementsAre(0.0f, -1.0f));  // replica 0's mean alone
}

TEST_F(SyncStepsTest, AMissingReplicaTimesOutWithItsNumberAndTheShareIsKept) {
  Pending a;
  jobs_.PushAsync(Share(0, 3, 1, 0, 1.0f), &a.response, a.Callback());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsAborted(a.status)) << a.status;
  EXPECT_THAT(a.status.message(), HasSubstr("replica(s) 1, 2 of 3"));
  // The retry of replicas 1 and 2 completes the step with replica 0's share.
  PushResponse r;
  ASSERT_TRUE(jobs_.Push(Share(1, 3, 1, 0, 1.0f, {}, /*pull=*/false), &r).ok());
  ASSERT_TRUE(jobs_.Push(Share(2, 3, 1, 0, 4.0f), &r).ok());
  EXPECT_THAT(Read("w"), ElementsAre(-1.0f, -3.0f));
}

TEST_F(SyncStepsTest, BadSharesAreRefusedWithoutCounting) {
  PushResponse r;
  absl::Status s = jobs_.Push(Share(2, 2, 1, 0, 1.0f), &r);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("replica 2 of 2"));
  PushRequest nan = Share(0, 2, 1, 0, std::nanf(""));
  s = jobs_.Push(nan, &r);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("non-finite"));
  PushRequest wrong = Share(0, 2, 1, 0, 1.0f);
  EncodeTensor({3}, std::vector<float>{1, 2, 3}, wrong.mutable_gradients(0)->mutable_tensor());
  EXPECT_TRUE(absl::IsInvalidArgument(jobs_.Push(wrong, &r)));
  // Replica 0 still has no share in: two good shares make the step.
  Pending a;
  jobs_.PushAsync(Share(0, 2, 1, 0, 2.0f), &a.response, a.Callback());
  ASSERT_TRUE(jobs_.Push(Share(1, 2, 1, 0, 2.0f), &r).ok());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(Read("w"), ElementsAre(-1.0f, -3.0f));
  // A share counting other replicas than the step's first.
  Pending b;
  jobs_.PushAsync(Share(0, 2, 1, 1, 1.0f), &b.response, b.Callback());
  s = jobs_.Push(Share(1, 3, 1, 1, 1.0f), &r);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  ASSERT_TRUE(jobs_.Push(Share(1, 2, 1, 1, 1.0f), &r).ok());
  ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
}

TEST_F(SyncStepsTest, RestoreAndEndJobAnswerWaiters) {
  Pending a;
  jobs_.PushAsync(Share(0, 2, 1, 0, 1.0f), &a.response, a.Callback());
  EndJobRequest end;
  end.set_job(kJob);
  EndJobResponse ended;
  ASSERT_TRUE(jobs_.EndJob(end, &ended).ok());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(absl::IsAborted(a.status)) << a.status;
  EXPECT_THAT(a.status.message(), HasSubstr("the job ended"));
}

TEST_F(SyncStepsTest, ManyReplicasOnThreads) {
  constexpr int kReplicas = 8;
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<std::thread> threads;
    std::vector<absl::Status> status(kReplicas);
    for (int r = 0; r < kReplicas; ++r) {
      threads.emplace_back([&, r] {
        PushResponse resp;
        status[r] = jobs_.Push(Share(r, kReplicas, 1, step, 0.125f), &resp);
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& s : status) ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(AppliedSteps(), 20);
  EXPECT_THAT(Read("w"), ElementsAre(1.0f - 20 * 0.125f, 1.0f - 20 * 0.25f));
}

}  // namespace
}  // namespace pscluster
