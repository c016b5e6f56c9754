#include "ps/core/variable_store.h"

#include <prometheus/registry.h>

#include <string>
#include <thread>
#include <vector>

#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

VariableSpecProto Spec(const std::string& name, Shape shape, const std::string& optimizer = "sgd",
                       float lr = 0.1f, float init = 0.5f) {
  VariableSpecProto spec;
  spec.set_name(name);
  spec.set_dtype(DT_FLOAT32);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.mutable_initializer()->set_type("constant");
  spec.mutable_initializer()->set_value(init);
  spec.mutable_optimizer()->set_type(optimizer);
  spec.mutable_optimizer()->set_learning_rate(lr);
  spec.mutable_optimizer()->set_beta1(0.9f);
  spec.mutable_optimizer()->set_beta2(0.999f);
  spec.mutable_optimizer()->set_epsilon(1e-7f);
  return spec;
}

absl::Status Create(VariableStore& store, std::vector<VariableSpecProto> specs,
                    int* existing = nullptr) {
  CreateVariablesRequest req;
  for (auto& s : specs) *req.add_variables() = std::move(s);
  CreateVariablesResponse resp;
  absl::Status s = store.CreateVariables(req, &resp);
  if (existing != nullptr) *existing = resp.existing();
  return s;
}

absl::StatusOr<std::vector<float>> PullOne(VariableStore& store, const std::string& name) {
  PullRequest req;
  req.add_names(name);
  PullResponse resp;
  if (absl::Status s = store.Pull(req, &resp); !s.ok()) return s;
  auto t = DecodeTensor(resp.tensors(0).tensor());
  if (!t.ok()) return t.status();
  return t->ToVector();
}

NamedTensor Grad(const std::string& name, Shape shape, float value) {
  NamedTensor g;
  g.set_name(name);
  std::vector<float> values(NumElements(shape), value);
  EncodeTensor(shape, values, g.mutable_tensor());
  return g;
}

absl::Status Push(VariableStore& store, std::vector<NamedTensor> grads) {
  PushRequest req;
  for (auto& g : grads) *req.add_gradients() = std::move(g);
  PushResponse resp;
  return store.Push(req, &resp);
}

StatsResponse GetStats(VariableStore& store) {
  StatsResponse resp;
  EXPECT_TRUE(store.Stats(StatsRequest(), &resp).ok());
  return resp;
}

TEST(VariableStoreTest, CreatePullPushRoundtrip) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {2, 3}), Spec("b", {3})}).ok());

  PullRequest req;
  req.add_names("b");
  req.add_names("w");
  PullResponse resp;
  ASSERT_TRUE(store.Pull(req, &resp).ok());
  ASSERT_EQ(resp.tensors_size(), 2);
  EXPECT_EQ(resp.tensors(0).name(), "b");
  EXPECT_EQ(resp.tensors(1).name(), "w");
  auto w = DecodeTensor(resp.tensors(1).tensor());
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->shape(), ElementsAre(2, 3));
  EXPECT_THAT(w->values(), Each(0.5f));

  ASSERT_TRUE(Push(store, {Grad("w", {2, 3}, 1.0f)}).ok());
  auto after = PullOne(store, "w");
  ASSERT_TRUE(after.ok());
  EXPECT_THAT(*after, Each(::testing::FloatEq(0.4f)));

  StatsResponse stats = GetStats(store);
  EXPECT_EQ(stats.applied_updates(), 1);
  ASSERT_EQ(stats.variables_size(), 2);
  EXPECT_EQ(stats.variables(1).name(), "w");
  EXPECT_THAT(stats.variables(1).shape(), ElementsAre(2, 3));
  EXPECT_EQ(stats.variables(1).parameter_bytes(), 24);
  EXPECT_EQ(stats.variables(1).slot_bytes(), 0);
  EXPECT_EQ(stats.variables(1).updates(), 1);
  EXPECT_EQ(stats.variables(0).updates(), 0);
}

TEST(VariableStoreTest, PushWithPullAnswersAfterApplyingAndForDuplicates) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {2, 3}), Spec("b", {3})}).ok());
  PushRequest req;
  *req.add_gradients() = Grad("w", {2, 3}, 1.0f);
  req.mutable_update()->set_closure_id(7);
  req.mutable_update()->set_step(0);
  req.mutable_pull()->add_names("w");
  req.mutable_pull()->add_names("b");
  PushResponse resp;
  ASSERT_TRUE(store.Push(req, &resp).ok());
  EXPECT_FALSE(resp.duplicate());
  ASSERT_EQ(resp.pulled().tensors_size(), 2);
  EXPECT_EQ(resp.pulled().tensors(0).name(), "w");
  auto w = DecodeTensor(resp.pulled().tensors(0).tensor());
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->values(), Each(::testing::FloatEq(0.4f)));  // after the push

  // The same key again: dropped, but the pull is still answered.
  PushResponse again;
  ASSERT_TRUE(store.Push(req, &again).ok());
  EXPECT_TRUE(again.duplicate());
  ASSERT_EQ(again.pulled().tensors_size(), 2);
  w = DecodeTensor(again.pulled().tensors(0).tensor());
  EXPECT_THAT(w->values(), Each(::testing::FloatEq(0.4f)));
  EXPECT_EQ(GetStats(store).applied_updates(), 1);
}

TEST(VariableStoreTest, PushWithBadPullAppliesNothing) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {2})}).ok());
  PushRequest req;
  *req.add_gradients() = Grad("w", {2}, 1.0f);
  req.mutable_update()->set_closure_id(1);
  req.mutable_update()->set_step(0);
  req.mutable_pull()->add_names("missing");
  PushResponse resp;
  absl::Status s = store.Push(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("'missing'"));
  EXPECT_EQ(GetStats(store).applied_updates(), 0);
  EXPECT_EQ(GetStats(store).applied_steps(), 0);
  // The key was not claimed: the corrected request applies.
  req.mutable_pull()->set_names(0, "w");
  ASSERT_TRUE(store.Push(req, &resp).ok());
  EXPECT_FALSE(resp.duplicate());
  EXPECT_EQ(GetStats(store).applied_updates(), 1);
}

TEST(VariableStoreTest, AdamSlotsAreReported) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {10}, "adam", 0.001f)}).ok());
  StatsResponse stats = GetStats(store);
  EXPECT_EQ(stats.variables(0).slot_bytes(), 2 * 40);
}

TEST(VariableStoreTest, CreateIsIdempotentAndKeepsValues) {
  VariableStore store;
  int existing = -1;
  ASSERT_TRUE(Create(store, {Spec("w", {4})}, &existing).ok());
  EXPECT_EQ(existing, 0);
  ASSERT_TRUE(Push(store, {Grad("w", {4}, 1.0f)}).ok());
  ASSERT_TRUE(Create(store, {Spec("w", {4}), Spec("v", {1})}, &existing).ok());
  EXPECT_EQ(existing, 1);
  auto w = PullOne(store, "w");
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(*w, Each(::testing::FloatEq(0.4f)));  // Not re-initialised.
  EXPECT_TRUE(PullOne(store, "v").ok());
}

TEST(VariableStoreTest, CreateWithDifferentSpecIsAlreadyExists) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {4})}).ok());
  absl::Status s = Create(store, {Spec("new", {1}), Spec("w", {5})});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("'w'"), HasSubstr("[4]"), HasSubstr("[5]")));
  EXPECT_EQ(PullOne(store, "new").status().code(), absl::StatusCode::kNotFound);

  s = Create(store, {Spec("w", {4}, "adam", 0.001f)});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()), HasSubstr("optimizer"));
}

TEST(VariableStoreTest, CreateRejectsBadSpecsAndCreatesNothing) {
  std::vector<std::pair<VariableSpecProto, std::string>> cases;
  cases.emplace_back(Spec("", {1}), "empty name");
  VariableSpecProto spec = Spec("x", {1});
  spec.set_dtype(DT_INVALID);
  cases.emplace_back(spec, "dtype");
  cases.emplace_back(Spec("x", {2, -1}), "negative");
  cases.emplace_back(Spec("x", {1 << 20, 1 << 20}), "elements");
  spec = Spec("x", {1});
  spec.mutable_initializer()->set_type("bogus");
  cases.emplace_back(spec, "unknown initializer");
  cases.emplace_back(Spec("x", {1}, "rmsprop"), "unknown optimizer");
  cases.emplace_back(Spec("x", {1}, "sgd", -1.0f), "learning_rate");
  for (const auto& [bad, message] : cases) {
    VariableStore store;
    absl::Status s = Create(store, {Spec("good", {1}), bad});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
    EXPECT_EQ(GetStats(store).variables_size(), 0) << message;
  }
}

TEST(VariableStoreTest, PullUnknownIsNotFound) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {1})}).ok());
  PullRequest req;
  req.add_names("w");
  req.add_names("missing");
  PullResponse resp;
  absl::Status s = store.Pull(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'missing'"));
}

TEST(VariableStoreTest, PushRejectsBadGradients) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("w", {2, 3})}).ok());

  absl::Status s = Push(store, {Grad("missing", {1}, 1.0f)});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'missing'"));

  s = Push(store, {Grad("w", {3, 2}, 1.0f)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("'w'"), HasSubstr("[3, 2]"), HasSubstr("[2, 3]")));

  NamedTensor wrong_dtype = Grad("w", {2, 3}, 1.0f);
  wrong_dtype.mutable_tensor()->set_dtype(DT_INVALID);
  s = Push(store, {wrong_dtype});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("'w'"), HasSubstr("dtype")));

  NamedTensor short_data = Grad("w", {2, 3}, 1.0f);
  short_data.mutable_tensor()->mutable_data()->resize(20);
  s = Push(store, {short_data});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("'w'"), HasSubstr("bytes")));

  EXPECT_EQ(GetStats(store).applied_updates(), 0);
}

TEST(VariableStoreTest, PushAppliesNothingIfAnyGradientIsBad) {
  VariableStore store;
  ASSERT_TRUE(Create(store, {Spec("a", {2}), Spec("b", {2})}).ok());
  absl::Status s = Push(store, {Grad("a", {2}, 1.0f), Grad("b", {3}, 1.0f)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  auto a = PullOne(store, "a");
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(*a, Each(0.5f));
  EXPECT_EQ(GetStats(store).applied_updates(), 0);
}

TEST(VariableStoreTest, ConcurrentPushesSumExactly) {
  VariableStore store;
  constexpr int kThreads = 4;
  constexpr int kPushes = 200;
  std::vector<VariableSpecProto> specs = {Spec("shared", {64}, "sgd", 1.0f, 0.0f)};
  for (int t = 0; t < kThreads; ++t) {
    specs.push_back(Spec("own" + std::to_string(t), {64}, "sgd", 1.0f, 0.0f));
  }
  ASSERT_TRUE(Create(store, specs).ok());

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, t] {
      const std::string own = "own" + std::to_string(t);
      for (int i = 0; i < kPushes; ++i) {
        EXPECT_TRUE(Push(store, {Grad("shared", {64}, 1.0f), Grad(own, {64}, 1.0f)}).ok());
        EXPECT_TRUE(PullOne(store, "shared").ok());
      }
    });
  }
  for (auto& th : threads) th.join();

  auto shared = PullOne(store, "shared");
  ASSERT_TRUE(shared.ok());
  EXPECT_THAT(*shared, Each(static_cast<float>(-kThreads * kPushes)));
  for (int t = 0; t < kThreads; ++t) {
    auto own = PullOne(store, "own" + std::to_string(t));
    ASSERT_TRUE(own.ok());
    EXPECT_THAT(*own, Each(static_cast<float>(-kPushes)));
  }
  StatsResponse stats = GetStats(store);
  EXPECT_EQ(stats.applied_updates(), 2 * kThreads * kPushes);
  EXPECT_EQ(stats.variables(kThreads).name(), "shared");
  EXPECT_EQ(stats.variables(kThreads).updates(), kThreads * kPushes);
}

TEST(VariableStoreTest, ConcurrentIdenticalCreatesMakeOneVariable) {
  VariableStore store;
  std::vector<std::thread> threads;
  std::atomic<int> existing_total{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      int existing = 0;
      EXPECT_TRUE(Create(store, {Spec("w", {128})}, &existing).ok());
      existing_total += existing;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(existing_total.load(), 3);
  EXPECT_EQ(GetStats(store).variables_size(), 1);
}

double CounterValue(prometheus::Registry& registry, const std::string& name) {
  for (const auto& family : registry.Collect()) {
    if (family.name == name && !family.metric.empty()) return family.metric[0].counter.value;
  }
  return -1;
}

TEST(VariableStoreTest, ExportsCounters) {
  auto registry = std::make_shared<prometheus::Registry>();
  VariableStore::Options options;
  options.registry = registry;
  VariableStore store(options);
  ASSERT_TRUE(Create(store, {Spec("w", {4})}).ok());
  ASSERT_TRUE(Push(store, {Grad("w", {4}, 1.0f)}).ok());
  ASSERT_TRUE(PullOne(store, "w").ok());
  EXPECT_EQ(CounterValue(*registry, "pscluster_ps_applied_updates_total"), 1);
  EXPECT_EQ(CounterValue(*registry, "pscluster_ps_push_requests_total"), 1);
  EXPECT_EQ(CounterValue(*registry, "pscluster_ps_pull_requests_total"), 1);
  EXPECT_EQ(CounterValue(*registry, "pscluster_ps_bytes_pushed_total"), 16);
  EXPECT_EQ(CounterValue(*registry, "pscluster_ps_bytes_pulled_total"), 16);
}

}  // namespace
}  // namespace pscluster
