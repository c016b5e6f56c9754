// VariableStore with learning-rate schedules: a push whose UpdateKey carries
// a global step is applied at the schedule's rate for that step (dense
// variables, embedding rows and hash tables alike); without one, at the
// configured learning_rate; exactly-once keys are unchanged.
#include <string>
#include <vector>

#include "common/row_ids.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::Each;
using ::testing::FloatNear;
using ::testing::HasSubstr;

// sgd at 1.0 after a 10-step warmup from 0, then cosine decay over 100
// steps to 0: rate(5) = 0.5, rate(10) = 1, rate(60) = 0.5, rate(110) = 0.
OptimizerProto ScheduledSgd() {
  OptimizerProto o;
  o.set_type("sgd");
  o.set_learning_rate(1.0f);  // the peak: pushes without a global step
  LearningRateScheduleProto* s = o.mutable_schedule();
  s->set_initial(1.0);
  s->set_warmup_steps(10);
  s->set_decay(LearningRateScheduleProto::COSINE);
  s->set_decay_steps(100);
  return o;
}

VariableSpecProto Spec(const std::string& name, Shape shape, VariableKind kind = DENSE) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("zeros");
  *spec.mutable_optimizer() = ScheduledSgd();
  spec.set_kind(kind);
  return spec;
}

// "applied", "duplicate", or the error.
std::string Outcome(const absl::StatusOr<bool>& pushed) {
  if (!pushed.ok()) return pushed.status().ToString();
  return *pushed ? "duplicate" : "applied";
}

class ScheduleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CreateVariablesRequest req;
    *req.add_variables() = Spec("w", {4});
    *req.add_variables() = Spec("emb", {3, 2});  // rows pushed sparse
    *req.add_variables() = Spec("table", {2}, HASH_TABLE);
    CreateVariablesResponse resp;
    ASSERT_TRUE(store_.CreateVariables(req, &resp).ok());
  }

  // Pushes gradient 1 to every element of w, row 1 of emb and id 7 of the
  // table; keyed (closure, step) when closure >= 0, with `global_step` when
  // it is >= 0 (or -2: a negative one).
  absl::StatusOr<bool> Push(int64_t closure, int64_t step, int64_t global_step) {
    PushRequest req;
    NamedTensor* g = req.add_gradients();
    g->set_name("w");
    EncodeTensor({4}, std::vector<float>(4, 1.0f), g->mutable_tensor());
    for (const std::string name : {"emb", "table"}) {
      SparseGradient* sg = req.add_sparse();
      sg->set_name(name);
      sg->set_ids(EncodeRowIds(std::vector<int64_t>{name == "emb" ? 1 : 7}));
      EncodeTensor({1, 2}, std::vector<float>(2, 1.0f), sg->mutable_rows());
    }
    if (closure >= 0) {
      req.mutable_update()->set_closure_id(closure);
      req.mutable_update()->set_step(step);
      if (global_step != -1) req.mutable_update()->set_global_step(global_step);
    }
    PushResponse resp;
    if (absl::Status s = store_.Push(req, &resp); !s.ok()) return s;
    return resp.duplicate();
  }

  // w, emb's row 1 and the table's row of id 7, each expected equal.
  std::vector<float> Values() {
    PullRequest req;
    req.add_names("w");
    RowIds* e = req.add_lookups();
    e->set_name("emb");
    e->set_ids(EncodeRowIds(std::vector<int64_t>{1}));
    RowIds* t = req.add_lookups();
    t->set_name("table");
    t->set_ids(EncodeRowIds(std::vector<int64_t>{7}));
    PullResponse resp;
    EXPECT_TRUE(store_.Pull(req, &resp).ok());
    std::vector<float> out;
    for (const NamedTensor* n : {&resp.tensors(0), &resp.rows(0), &resp.rows(1)}) {
      std::vector<float> v = DecodeTensor(n->tensor())->ToVector();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  VariableStore store_{VariableStore::Options()};
};

TEST_F(ScheduleTest, PushWithGlobalStepAppliesTheScheduledRate) {
  float expected = 0;
  ASSERT_EQ(Outcome(Push(1, 0, 5)), "applied");  // warmup: rate 0.5
  expected -= 0.5f;
  EXPECT_THAT(Values(), Each(FloatNear(expected, 1e-6f)));
  ASSERT_EQ(Outcome(Push(1, 1, 0)), "applied");  // step 0 of a warmup from 0: rate 0
  EXPECT_THAT(Values(), Each(FloatNear(expected, 1e-6f)));
  ASSERT_EQ(Outcome(Push(1, 2, 60)), "applied");  // halfway down the cosine: 0.5
  expected -= 0.5f;
  EXPECT_THAT(Values(), Each(FloatNear(expected, 1e-6f)));
  ASSERT_EQ(Outcome(Push(1, 3, 35)), "applied");  // 0.5 * (1 + cos(pi / 4)) = 0.853553
  expected -= 0.8535534f;
  EXPECT_THAT(Values(), Each(FloatNear(expected, 1e-6f)));
  ASSERT_EQ(Outcome(Push(1, 4, 500)), "applied");  // past the decay: 0
  EXPECT_THAT(Values(), Each(FloatNear(expected, 1e-6f)));
}

TEST_F(ScheduleTest, PushWithoutGlobalStepAppliesTheConfiguredRate) {
  ASSERT_EQ(Outcome(Push(-1, 0, -1)), "applied");  // no key at all (tools, benchmarks)
  EXPECT_THAT(Values(), Each(FloatNear(-1.0f, 1e-6f)));
  ASSERT_EQ(Outcome(Push(2, 0, -1)), "applied");  // a key without a global step
  EXPECT_THAT(Values(), Each(FloatNear(-2.0f, 1e-6f)));
}

TEST_F(ScheduleTest, RetriedStepIsStillAppliedOnce) {
  ASSERT_EQ(Outcome(Push(3, 0, 5)), "applied");
  // The retry carries the same key (and global step): dropped.
  ASSERT_EQ(Outcome(Push(3, 0, 5)), "duplicate");
  EXPECT_THAT(Values(), Each(FloatNear(-0.5f, 1e-6f)));
}

TEST_F(ScheduleTest, NegativeGlobalStepIsRefusedAndAppliesNothing) {
  absl::StatusOr<bool> pushed = Push(4, 0, -2);
  ASSERT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pushed.status().message(), HasSubstr("global_step -2 is negative"));
  EXPECT_THAT(Values(), Each(FloatNear(0.0f, 1e-6f)));
  // The key was not recorded: the same step with a valid global step applies.
  ASSERT_EQ(Outcome(Push(4, 0, 10)), "applied");
  EXPECT_THAT(Values(), Each(FloatNear(-1.0f, 1e-6f)));
}

TEST(VariableStoreScheduleTest, CreateRejectsBadSchedules) {
  VariableStore store{VariableStore::Options()};
  struct Bad {
    std::string type;
    int64_t decay_steps;
    std::string message;
  };
  for (const Bad& c : std::vector<Bad>{
           {"sgd", 0, "optimizer sgd: learning_rate.decay_steps must be in [1, "},
           {"ftrl", 100, "optimizer ftrl: a learning-rate schedule needs sgd, momentum, adagrad"},
       }) {
    VariableSpecProto spec = Spec("v", {2});
    spec.mutable_optimizer()->set_type(c.type);
    spec.mutable_optimizer()->mutable_schedule()->set_decay_steps(c.decay_steps);
    CreateVariablesRequest req;
    *req.add_variables() = spec;
    CreateVariablesResponse resp;
    const absl::Status s = store.CreateVariables(req, &resp);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.type;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace pscluster
