// FunctionJob on two in-process PS: registry errors, a function's pulls and
// pushes (whole and by row, over a partitioned variable), a retried closure
// applied once, and a function's own errors kept apart from the cluster's.
#include "worker/core/function_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control_auth.h"
#include "common/model_variables.h"
#include "common/partitioner.h"
#include "common/update_lease.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"
#include "worker/core/worker_state.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = "program-test";

VariableSpecProto Var(const std::string& name, std::vector<int64_t> shape) {
  VariableSpecProto v;
  v.set_name(name);
  v.set_dtype(DT_FLOAT32);
  for (int64_t d : shape) v.add_shape(d);
  v.mutable_initializer()->set_type("zeros");
  v.mutable_optimizer()->set_type("sgd");
  v.mutable_optimizer()->set_learning_rate(1.0f);
  return v;
}

class FunctionJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_key_ = std::string(kJobKeyBytes, 'k');
    // "emb" [10, 4] in two shards, "w" [3] whole.
    const std::vector<VariableSpecProto> vars = {Var("emb", {10, 4}), Var("w", {3})};
    absl::StatusOr<VariablePlan> plan = PlanVariables(vars, PartitionerSpec::Fixed(2), 2);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<std::unique_ptr<PsClient>> ps;
    for (int p = 0; p < 2; ++p) {
      CreateVariablesRequest request = plan->per_ps[p];
      request.set_job(kJob);
      request.set_job_key(job_key_);
      SignRequest(job_key_, "CreateVariables", &request);
      CreateVariablesResponse response;
      const absl::Status created = clients_[p].CreateVariables(request, &response);
      ASSERT_TRUE(created.ok()) << created;
      ps.push_back(std::make_unique<InProcessPsClient>(&stores_[p]));
    }
    setup_.set_job_id(kJob);
    setup_.set_program(true);
    for (const auto& v : vars) *setup_.add_variables() = v;
    for (const auto& p : plan->placement) *setup_.add_placement() = p;
    ASSERT_TRUE(registry_.Register("step", [](FunctionContext& ctx, const std::string& args)
                                               -> absl::StatusOr<std::string> {
      // Pulls w, pushes a gradient of ones to it and to rows 1, 7, 7 of emb.
      absl::StatusOr<Tensor> w = ctx.Pull("w");
      if (!w.ok()) return w.status();
      if (absl::Status s = ctx.Push({{"w", Tensor({3}, {1, 1, 1})}}); !s.ok()) return s;
      if (absl::Status s = ctx.PushRows("emb", {1, 7, 7}, Tensor({3, 4}, std::vector<float>(12, 1)));
          !s.ok()) {
        return s;
      }
      return args + ":" + std::to_string(w->values()[0]);
    }).ok());
    absl::StatusOr<std::unique_ptr<FunctionJob>> job =
        FunctionJob::Create(setup_, std::move(ps), &registry_);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
  }

  RunClosureRequest Closure(int64_t id, const std::string& function, int64_t steps = 8) {
    RunClosureRequest r;
    r.set_job_id(kJob);
    r.set_closure_id(id);
    r.set_mode(FUNCTION);
    r.set_function(function);
    r.set_function_args("a");
    r.set_lease_steps(steps);
    r.set_lease(MakeLease(job_key_, kJob, id, steps));
    return r;
  }

  StatsResponse Stats(int p) {
    StatsRequest request;
    request.set_job(kJob);
    SignRequest(job_key_, "Stats", &request);
    StatsResponse stats;
    EXPECT_TRUE(clients_[p].Stats(request, &stats).ok());
    return stats;
  }

  std::string job_key_;
  JobStores stores_[2];
  InProcessPsClient clients_[2] = {InProcessPsClient(&stores_[0]), InProcessPsClient(&stores_[1])};
  SetupJobRequest setup_;
  FunctionRegistry registry_;
  std::unique_ptr<FunctionJob> job_;
};

TEST(FunctionRegistryTest, RefusesBadRegistrationsAndNamesWhatItHas) {
  FunctionRegistry registry;
  auto f = [](FunctionContext&, const std::string&) -> absl::StatusOr<std::string> { return ""; };
  EXPECT_EQ(registry.Register("", f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("empty", nullptr).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry.Register("train_step", f).ok());
  EXPECT_EQ(registry.Register("train_step", f).code(), absl::StatusCode::kAlreadyExists);
  const absl::Status unknown = registry.Check("eval");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("no function 'eval'"));
  EXPECT_THAT(unknown.message(), HasSubstr("it has: train_step"));
}

TEST_F(FunctionJobTest, RetriedClosureIsAppliedOnce) {
  RunClosureResponse first;
  ASSERT_TRUE(job_->RunClosure(Closure(5, "step"), &first).ok());
  EXPECT_EQ(first.function_result(), "a:0.000000");
  EXPECT_EQ(first.steps(), 2);
  // The same closure again (a retry on another worker): every push is a
  // duplicate, so w is pulled after the first run's step only.
  RunClosureResponse retry;
  ASSERT_TRUE(job_->RunClosure(Closure(5, "step"), &retry).ok());
  EXPECT_EQ(retry.function_result(), "a:-1.000000");
  RunClosureResponse next;
  ASSERT_TRUE(job_->RunClosure(Closure(6, "step"), &next).ok());
  EXPECT_EQ(next.function_result(), "a:-1.000000");
  int64_t applied = 0, duplicates = 0;
  for (int p = 0; p < 2; ++p) {
    applied += Stats(p).applied_steps();
    duplicates += Stats(p).duplicate_steps();
  }
  // Closures 5 and 6, two steps each, reaching w's PS and emb's shards.
  EXPECT_GT(applied, 0);
  EXPECT_GT(duplicates, 0);
  EXPECT_EQ(applied, 2 * duplicates);
}

TEST_F(FunctionJobTest, PullRowsAndPushRowsOverShards) {
  RunClosureResponse response;
  ASSERT_TRUE(job_->RunClosure(Closure(1, "step"), &response).ok());
  ASSERT_TRUE(registry_.Register("rows", [](FunctionContext& ctx, const std::string&)
                                               -> absl::StatusOr<std::string> {
    absl::StatusOr<Tensor> rows = ctx.PullRows("emb", {7, 1, 0});
    if (!rows.ok()) return rows.status();
    EXPECT_EQ(rows->shape(), (Shape{3, 4}));
    std::string out;
    for (int r = 0; r < 3; ++r) out += std::to_string(static_cast<int>(rows->values()[r * 4]));
    return out;
  }).ok());
  ASSERT_TRUE(job_->RunClosure(Closure(2, "rows"), &response).ok());
  // Row 7 got two gradients of 1 (summed), row 1 one; lr 1.
  EXPECT_EQ(response.function_result(), "-2-10");
}

// PushAndPull reads whole variables back with its step: from the PS the
// step reaches in the push's round trip, after applying it (also when a
// retry's push is a duplicate), and from the other PS by a pull of its own.
TEST_F(FunctionJobTest, PushAndPullReadsBackAfterTheStep) {
  ASSERT_TRUE(registry_.Register("fused", [](FunctionContext& ctx, const std::string& args)
                                                -> absl::StatusOr<std::string> {
    const std::vector<std::string> names = {"emb", args == "bad" ? "nope" : "w"};
    absl::StatusOr<std::vector<Tensor>> read =
        ctx.PushAndPull({{"w", Tensor({3}, {1, 2, 3})}}, names);
    if (!read.ok()) return read.status();
    EXPECT_EQ((*read)[0].shape(), (Shape{10, 4}));
    std::string out;
    for (float x : (*read)[1].values()) out += std::to_string(static_cast<int>(x));
    // Rows 1 and 7 of emb, one in each shard.
    const Tensor& emb = (*read)[0];
    return absl::StrCat(out, ":", emb.values()[4], ",", emb.values()[28]);
  }).ok());
  RunClosureResponse r;
  ASSERT_TRUE(job_->RunClosure(Closure(1, "step"), &r).ok());  // w -1; emb row 1 -1, row 7 -2
  r.Clear();
  ASSERT_TRUE(job_->RunClosure(Closure(2, "fused"), &r).ok());
  EXPECT_EQ(r.function_result(), "-2-3-4:-1,-2");
  EXPECT_EQ(r.steps(), 1);
  r.Clear();
  ASSERT_TRUE(job_->RunClosure(Closure(2, "fused"), &r).ok());  // the retry: applied once
  EXPECT_EQ(r.function_result(), "-2-3-4:-1,-2");
  // An unknown name sends nothing and takes no step.
  RunClosureRequest bad = Closure(3, "fused");
  bad.set_function_args("bad");
  r.Clear();
  ASSERT_TRUE(job_->RunClosure(bad, &r).ok());
  EXPECT_THAT(r.function_error().message(), HasSubstr("unknown variable 'nope'"));
  EXPECT_EQ(r.steps(), 0);
  r.Clear();
  ASSERT_TRUE(job_->RunClosure(Closure(4, "fused"), &r).ok());
  EXPECT_EQ(r.function_result(), "-3-5-7:-1,-2");
}

TEST_F(FunctionJobTest, FunctionErrorsAreTheFunctions) {
  ASSERT_TRUE(registry_.Register("fails", [](FunctionContext&, const std::string&)
                                                -> absl::StatusOr<std::string> {
    return absl::InvalidArgumentError("bad batch");
  }).ok());
  ASSERT_TRUE(registry_.Register("throws", [](FunctionContext&, const std::string&)
                                                 -> absl::StatusOr<std::string> {
    throw std::runtime_error("boom");
  }).ok());
  ASSERT_TRUE(registry_.Register("bad_push", [](FunctionContext& ctx, const std::string&)
                                                   -> absl::StatusOr<std::string> {
    if (absl::Status s = ctx.Push({{"w", Tensor({2}, {1, 1})}}); !s.ok()) return s;
    return "";
  }).ok());
  RunClosureResponse r;
  ASSERT_TRUE(job_->RunClosure(Closure(1, "fails"), &r).ok());
  EXPECT_EQ(r.function_error().type(), "INVALID_ARGUMENT");
  EXPECT_EQ(r.function_error().message(), "bad batch");
  r.Clear();
  ASSERT_TRUE(job_->RunClosure(Closure(2, "throws"), &r).ok());
  EXPECT_EQ(r.function_error().type(), "std::exception");
  EXPECT_EQ(r.function_error().message(), "boom");
  r.Clear();
  ASSERT_TRUE(job_->RunClosure(Closure(3, "bad_push"), &r).ok());
  EXPECT_THAT(r.function_error().message(), HasSubstr("the gradient of variable 'w' is [2]"));
  EXPECT_EQ(r.steps(), 0);
  // Past the lease: the second push is refused at the worker.
  r.Clear();
  ASSERT_TRUE(job_->RunClosure(Closure(4, "step", /*steps=*/1), &r).ok());
  EXPECT_THAT(r.function_error().message(), HasSubstr("more than the 1 steps its lease covers"));
  // An unknown function is no closure of this worker's: NOT_FOUND.
  const absl::Status unknown = job_->RunClosure(Closure(5, "nope"), &r);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("no function 'nope'"));
  RunClosureRequest train = Closure(6, "step");
  train.set_mode(TRAIN);
  EXPECT_EQ(job_->RunClosure(train, &r).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FunctionJobTest, BadPlacementIsRefused) {
  SetupJobRequest bad = setup_;
  bad.mutable_placement()->RemoveLast();
  std::vector<std::unique_ptr<PsClient>> ps;
  ps.push_back(std::make_unique<InProcessPsClient>(&stores_[0]));
  ps.push_back(std::make_unique<InProcessPsClient>(&stores_[1]));
  absl::StatusOr<std::unique_ptr<FunctionJob>> job =
      FunctionJob::Create(bad, std::move(ps), &registry_);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("has no placement"));
}

// A hash table's placement must be one shard per PS, shard i on PS i.
TEST(VariableTableTest, HashTablesAreOneShardPerPs) {
  VariableSpecProto table = Var("ids", {4});
  table.set_kind(HASH_TABLE);
  absl::StatusOr<VariablePlan> plan = PlanVariables({table}, PartitionerSpec(), 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<VariableTable> ok = VariableTable::Create({table}, plan->placement, 2);
  ASSERT_TRUE(ok.ok()) << ok.status();
  const VariableTable::Variable* v = ok->Find("ids");
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->hash_table);
  EXPECT_EQ(v->pieces.size(), 2u);
  EXPECT_EQ(v->row_elems, 4);
  std::vector<VariablePlacementProto> one_shard = plan->placement;
  one_shard[0].mutable_shards()->RemoveLast();
  absl::StatusOr<VariableTable> bad = VariableTable::Create({table}, one_shard, 2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("one shard per PS"));
}

TEST_F(FunctionJobTest, WorkerStateRunsProgramJobsOnlyWithFunctions) {
  auto factory = [this](const std::string& address) -> std::unique_ptr<PsClient> {
    return std::make_unique<InProcessPsClient>(&stores_[address == "ps1" ? 1 : 0]);
  };
  SetupJobRequest setup = setup_;
  setup.add_ps_addresses("ps0");
  setup.add_ps_addresses("ps1");
  SetupJobResponse response;
  WorkerState plain(factory);
  const absl::Status refused = plain.SetupJob(setup, &response);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("runs no functions"));

  WorkerState state(factory);
  state.set_function_runner(&registry_);
  ASSERT_TRUE(state.SetupJob(setup, &response).ok());
  EXPECT_EQ(response.backend(), "functions");
  RunClosureResponse r;
  ASSERT_TRUE(state.RunClosure(Closure(9, "step"), &r).ok());
  EXPECT_EQ(r.steps(), 2);
  PingResponse ping;
  ASSERT_TRUE(state.Ping(PingRequest(), &ping).ok());
  EXPECT_EQ(ping.job_id(), kJob);
}

}  // namespace
}  // namespace pscluster
