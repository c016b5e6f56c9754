// VariableStore and staleness (docs/staleness.md): a pull reports the job's
// version on this PS (pushes applied), a push carrying its pull's version
// has its staleness measured (the pushes applied in between), and with
// OptimizerProto.inverse_staleness_lr it is applied at lr / max(1,
// staleness) — dense variables, embedding rows and hash tables alike.
#include <prometheus/registry.h>

#include <memory>
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

VariableSpecProto Spec(const std::string& name, Shape shape, bool inverse, bool schedule,
                       VariableKind kind = DENSE) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("zeros");
  OptimizerProto* o = spec.mutable_optimizer();
  o->set_type("sgd");
  o->set_learning_rate(1.0f);
  o->set_inverse_staleness_lr(inverse);
  if (schedule) {
    // Warmup from 0 to 1 over 10 steps: rate(5) = 0.5.
    LearningRateScheduleProto* s = o->mutable_schedule();
    s->set_initial(1.0);
    s->set_warmup_steps(10);
  }
  spec.set_kind(kind);
  return spec;
}

class StalenessTest : public ::testing::Test {
 protected:
  void Create(bool inverse, bool schedule = false) {
    VariableStore::Options options;
    options.registry = registry_;
    store_ = std::make_unique<VariableStore>(options);
    CreateVariablesRequest req;
    *req.add_variables() = Spec("w", {4}, inverse, schedule);
    *req.add_variables() = Spec("emb", {3, 2}, inverse, schedule);  // rows pushed sparse
    *req.add_variables() = Spec("table", {2}, inverse, schedule, HASH_TABLE);
    CreateVariablesResponse resp;
    ASSERT_TRUE(store_->CreateVariables(req, &resp).ok());
  }

  // Pushes gradient 1 to w, row 1 of emb and id 7 of the table, keyed
  // (closure, 0), with `pulled_version` when >= 0 and `global_step` when
  // >= 0. Returns the response.
  PushResponse Push(int64_t closure, int64_t pulled_version, int64_t global_step = -1) {
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
    req.mutable_update()->set_closure_id(closure);
    req.mutable_update()->set_step(0);
    if (pulled_version >= 0) req.mutable_update()->set_pulled_version(pulled_version);
    if (global_step >= 0) req.mutable_update()->set_global_step(global_step);
    PushResponse resp;
    EXPECT_TRUE(store_->Push(req, &resp).ok());
    return resp;
  }

  // Pulls w, emb's row 1 and the table's id 7; *version gets the pull's.
  std::vector<float> Pull(int64_t* version = nullptr) {
    PullRequest req;
    req.add_names("w");
    RowIds* e = req.add_lookups();
    e->set_name("emb");
    e->set_ids(EncodeRowIds(std::vector<int64_t>{1}));
    RowIds* t = req.add_lookups();
    t->set_name("table");
    t->set_ids(EncodeRowIds(std::vector<int64_t>{7}));
    PullResponse resp;
    EXPECT_TRUE(store_->Pull(req, &resp).ok());
    EXPECT_TRUE(resp.has_version());
    if (version != nullptr) *version = resp.version();
    std::vector<float> out;
    for (const NamedTensor* n : {&resp.tensors(0), &resp.rows(0), &resp.rows(1)}) {
      std::vector<float> v = DecodeTensor(n->tensor())->ToVector();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }

  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::unique_ptr<VariableStore> store_;
};

TEST_F(StalenessTest, APullReportsThePushesAppliedAndAPushItsStaleness) {
  Create(/*inverse=*/false);
  int64_t v0 = -1;
  Pull(&v0);
  EXPECT_EQ(v0, 0);
  EXPECT_EQ(Push(1, v0).staleness(), 0);  // nothing applied in between
  int64_t v1 = -1;
  Pull(&v1);
  EXPECT_EQ(v1, 1);
  Push(2, -1);  // two other pushes land before the step's own
  Push(3, -1);
  const PushResponse stale = Push(4, v1);
  EXPECT_EQ(stale.staleness(), 2);
  // Without inverse_staleness_lr every push moved the weights by the full
  // rate: -4 each.
  EXPECT_THAT(Pull(), Each(FloatNear(-4.0f, 1e-6)));
  // A duplicate is not applied and measures nothing.
  const PushResponse dup = Push(4, 0);
  EXPECT_TRUE(dup.duplicate());
  EXPECT_EQ(dup.staleness(), 0);
  int64_t v2 = -1;
  Pull(&v2);
  EXPECT_EQ(v2, 4);
  // A fused pull reports the version after its own push.
  PushRequest req;
  req.mutable_update()->set_closure_id(9);
  req.mutable_update()->set_step(0);
  req.mutable_pull()->add_names("w");
  PushResponse resp;
  ASSERT_TRUE(store_->Push(req, &resp).ok());
  EXPECT_EQ(resp.pulled().version(), 5);
}

TEST_F(StalenessTest, InverseRateDividesByTheStaleness) {
  Create(/*inverse=*/true);
  int64_t v = -1;
  Pull(&v);
  Push(1, v);  // staleness 0: full rate
  EXPECT_THAT(Pull(), Each(FloatNear(-1.0f, 1e-6)));
  Pull(&v);
  Push(2, v);
  Push(3, v);  // 1 stale: still the full rate (max(1, s))
  EXPECT_THAT(Pull(), Each(FloatNear(-3.0f, 1e-6)));
  for (int64_t c = 10; c < 13; ++c) Push(c, -1);  // unmeasured: full rate
  EXPECT_THAT(Pull(), Each(FloatNear(-6.0f, 1e-6)));
  EXPECT_EQ(Push(20, v).staleness(), 5);  // 3 + 2 since v: 1/5 of the rate
  EXPECT_THAT(Pull(), Each(FloatNear(-6.2f, 1e-5)));
}

TEST_F(StalenessTest, InverseRateScalesTheScheduledRate) {
  Create(/*inverse=*/true, /*schedule=*/true);
  int64_t v = -1;
  Pull(&v);
  Push(1, -1, /*global_step=*/10);  // rate 1
  Push(2, -1, 10);
  EXPECT_THAT(Pull(), Each(FloatNear(-2.0f, 1e-6)));
  EXPECT_EQ(Push(3, v, /*global_step=*/5).staleness(), 2);  // 0.5 / 2
  EXPECT_THAT(Pull(), Each(FloatNear(-2.25f, 1e-6)));
}

TEST_F(StalenessTest, ExportsAHistogram) {
  Create(/*inverse=*/false);
  int64_t v = -1;
  Pull(&v);
  Push(1, v);
  Push(2, v);
  Push(3, -1);  // not measured
  double count = -1;
  double sum = -1;
  for (const prometheus::MetricFamily& f : registry_->Collect()) {
    if (f.name != "pscluster_ps_push_staleness") continue;
    ASSERT_EQ(f.metric.size(), 1u);
    count = static_cast<double>(f.metric[0].histogram.sample_count);
    sum = f.metric[0].histogram.sample_sum;
  }
  EXPECT_EQ(count, 2);
  EXPECT_EQ(sum, 1);  // 0 + 1
}

}  // namespace
}  // namespace pscluster
