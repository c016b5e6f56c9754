// VariableStore's exactly-once updates: a push with an UpdateKey applies at
// most once, whatever the retries and races.
#include <prometheus/registry.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;

double CounterValue(prometheus::Registry& registry, const std::string& name) {
  for (const auto& family : registry.Collect()) {
    if (family.name == name && !family.metric.empty()) return family.metric[0].counter.value;
  }
  return -1;
}

class ExactlyOnceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VariableStore::Options options;
    options.registry = registry_;
    store_ = std::make_unique<VariableStore>(options);
    CreateVariablesRequest req;
    VariableSpecProto* spec = req.add_variables();
    spec->set_name("w");
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(4);
    spec->mutable_initializer()->set_type("zeros");
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(1.0f);
    CreateVariablesResponse resp;
    ASSERT_TRUE(store_->CreateVariables(req, &resp).ok());
  }

  // Pushes gradient 1 to "w" (w -= 1), with the key if closure >= 0.
  absl::StatusOr<bool> Push(int64_t closure, int64_t step, Shape shape = {4}) {
    PushRequest req;
    NamedTensor* g = req.add_gradients();
    g->set_name("w");
    EncodeTensor(shape, std::vector<float>(NumElements(shape), 1.0f), g->mutable_tensor());
    if (closure >= 0) {
      req.mutable_update()->set_closure_id(closure);
      req.mutable_update()->set_step(step);
    }
    PushResponse resp;
    if (absl::Status s = store_->Push(req, &resp); !s.ok()) return s;
    return resp.duplicate();
  }

  float W() {
    PullRequest req;
    req.add_names("w");
    PullResponse resp;
    EXPECT_TRUE(store_->Pull(req, &resp).ok());
    return DecodeTensor(resp.tensors(0).tensor())->values()[0];
  }

  StatsResponse Stats() {
    StatsResponse stats;
    EXPECT_TRUE(store_->Stats(StatsRequest(), &stats).ok());
    return stats;
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<VariableStore> store_;
};

TEST_F(ExactlyOnceTest, RepeatedKeyIsAcknowledgedAndDropped) {
  EXPECT_EQ(*Push(7, 0), false);
  EXPECT_EQ(W(), -1.0f);
  EXPECT_EQ(*Push(7, 0), true);  // a retried closure re-sends step 0
  EXPECT_EQ(W(), -1.0f);
  EXPECT_EQ(*Push(7, 1), false);  // its next step is new
  EXPECT_EQ(*Push(8, 0), false);  // so is another closure's step 0
  EXPECT_EQ(W(), -3.0f);
  // Unkeyed pushes always apply.
  EXPECT_EQ(*Push(-1, 0), false);
  EXPECT_EQ(*Push(-1, 0), false);
  EXPECT_EQ(W(), -5.0f);

  const StatsResponse stats = Stats();
  EXPECT_EQ(stats.applied_steps(), 3);
  EXPECT_EQ(stats.duplicate_steps(), 1);
  EXPECT_EQ(stats.applied_updates(), 5);
  EXPECT_EQ(CounterValue(*registry_, "pscluster_ps_applied_steps_total"), 3);
  EXPECT_EQ(CounterValue(*registry_, "pscluster_ps_duplicate_steps_total"), 1);
  EXPECT_EQ(CounterValue(*registry_, "pscluster_ps_applied_updates_total"), 5);
}

TEST_F(ExactlyOnceTest, InvalidPushRecordsNoKey) {
  absl::StatusOr<bool> bad = Push(3, 0, {5});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(W(), 0.0f);
  EXPECT_EQ(*Push(3, 0), false);  // the valid retry applies
  EXPECT_EQ(W(), -1.0f);
  EXPECT_EQ(Stats().applied_steps(), 1);
  EXPECT_EQ(Stats().duplicate_steps(), 0);

  absl::StatusOr<bool> negative = Push(3, -1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("step -1"));
}

TEST_F(ExactlyOnceTest, ConcurrentPushesOfOneKeyApplyExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr int kKeys = 200;
  std::atomic<int> applied{0}, duplicates{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < kKeys; ++k) {
        absl::StatusOr<bool> dup = Push(k / 4, k % 4);
        if (!dup.ok()) {
          ++errors;
        } else if (*dup) {
          ++duplicates;
        } else {
          ++applied;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(applied.load(), kKeys);
  EXPECT_EQ(duplicates.load(), kKeys * (kThreads - 1));
  EXPECT_EQ(W(), -static_cast<float>(kKeys));
  EXPECT_EQ(Stats().applied_steps(), kKeys);
  EXPECT_EQ(Stats().duplicate_steps(), kKeys * (kThreads - 1));
}

}  // namespace
}  // namespace pscluster
