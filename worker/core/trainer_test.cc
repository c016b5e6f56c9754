#include "worker/core/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/model_variables.h"
#include "common/ps_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A CTR model on synthetic data: dense inputs, fixed-vocabulary embeddings
// split in two row shards over two PS, a hash-table embedding (one shard per
// PS), sigmoid loss.
JobSpec CtrSpec() {
  auto spec = ParseJobSpec(R"(
seed: 3
device: cpu
model:
  inputs:
    dense: 2
    categorical:
      - {name: user, vocab_size: 64, embedding_dim: 4, combiner: sum}
      - {name: item, vocab_size: 40, embedding_dim: 3, combiner: mean}
      - {name: tag, hashed: true, embedding_dim: 3}
  layers:
    - dense: {units: 8, activation: relu}
    - dense: {units: 1}
  loss: sigmoid_cross_entropy
optimizer: {type: adagrad, learning_rate: 0.2}
variable_partitioner: {type: fixed, num_shards: 2}
data:
  train: {format: synthetic_ctr, num_examples: 2048, id_space: 64, seed: 5}
  eval: {format: synthetic_ctr, num_examples: 512, id_space: 64, seed: 6}
  per_replica_batch: 64
)",
                           "ctr.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// What the trainer asked of one PS.
struct Traffic {
  int pulls = 0;
  int pushes = 0;
  int pushes_with_pull = 0;
  int pushes_with_version = 0;  // UpdateKey.pulled_version set
  std::vector<std::string> whole_reads;  // names pulled whole
};

// A real in-process PS client that records its traffic. `crowd`: before
// each keyed push it applies the same gradients once more, unkeyed, as
// another closure would: every step then finds one push applied since its
// pull (docs/staleness.md).
class RecordingPsClient : public PsClient {
 public:
  RecordingPsClient(VariableStore* store, Traffic* traffic, bool crowd = false)
      : inner_(store), traffic_(traffic), crowd_(crowd) {}
  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override {
    return inner_.CreateVariables(request, response);
  }
  absl::Status Pull(const PullRequest& request, PullResponse* response) override {
    ++traffic_->pulls;
    traffic_->whole_reads.insert(traffic_->whole_reads.end(), request.names().begin(),
                                 request.names().end());
    return inner_.Pull(request, response);
  }
  absl::Status Push(const PushRequest& request, PushResponse* response) override {
    ++traffic_->pushes;
    if (request.update().has_pulled_version()) ++traffic_->pushes_with_version;
    if (crowd_ && request.has_update()) {
      PushRequest other = request;
      other.clear_update();
      other.clear_pull();
      PushResponse ignored;
      if (absl::Status s = inner_.Push(other, &ignored); !s.ok()) return s;
    }
    if (request.has_pull()) {
      ++traffic_->pushes_with_pull;
      traffic_->whole_reads.insert(traffic_->whole_reads.end(), request.pull().names().begin(),
                                   request.pull().names().end());
    }
    return inner_.Push(request, response);
  }
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    return inner_.Stats(request, response);
  }

 private:
  InProcessPsClient inner_;
  Traffic* const traffic_;
  const bool crowd_;
};

// Two PS holding the job's variables as PlanVariables lays them out.
struct Cluster {
  explicit Cluster(const JobSpec& spec) {
    auto p = PlanVariables(ModelVariables(spec), spec.partitioner, 2);
    EXPECT_TRUE(p.ok()) << p.status();
    plan = *p;
    for (int ps = 0; ps < 2; ++ps) {
      stores.push_back(std::make_unique<VariableStore>());
      InProcessPsClient client(stores.back().get());
      CreateVariablesResponse created;
      EXPECT_TRUE(client.CreateVariables(plan.per_ps[ps], &created).ok());
    }
  }
  std::vector<std::unique_ptr<PsClient>> Clients(bool crowd = false) {
    std::vector<std::unique_ptr<PsClient>> clients;
    for (size_t i = 0; i < stores.size(); ++i) {
      clients.push_back(std::make_unique<RecordingPsClient>(stores[i].get(), &traffic[i], crowd));
    }
    return clients;
  }
  VariablePlan plan;
  std::vector<std::unique_ptr<VariableStore>> stores;
  Traffic traffic[2];
};

RunClosureResponse RunSplit(Trainer& trainer, ClosureMode mode, int64_t epoch, int64_t begin,
                            int64_t end) {
  RunClosureRequest req;
  // Each closure has its own id: the PS applies a (closure id, step) once.
  static int64_t next_closure_id = 1;
  req.set_closure_id(next_closure_id++);
  req.set_mode(mode);
  req.mutable_split()->set_epoch(epoch);
  req.mutable_split()->set_begin(begin);
  req.mutable_split()->set_end(end);
  RunClosureResponse resp;
  const absl::Status s = trainer.RunClosure(req, &resp);
  EXPECT_TRUE(s.ok()) << s;
  return resp;
}

// Training on sharded embeddings lowers the eval log-loss, and EVAL returns
// histograms that count every example once.
TEST(TrainerTest, TrainsACtrModelOnShardedEmbeddings) {
  const JobSpec spec = CtrSpec();
  Cluster cluster(spec);
  ASSERT_EQ(cluster.plan.placement[0].shards_size(), 2);  // embedding/user
  auto trainer = Trainer::Create(spec, cluster.Clients(), cluster.plan.placement);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const int64_t n_eval = (*trainer)->eval_examples();
  ASSERT_EQ(n_eval, 512);

  const RunClosureResponse before = RunSplit(**trainer, EVAL, 0, 0, n_eval);
  EXPECT_EQ(before.examples(), n_eval);
  ASSERT_EQ(before.positive_histogram_size(), kAucBuckets);
  ASSERT_EQ(before.negative_histogram_size(), kAucBuckets);
  int64_t counted = 0;
  for (int i = 0; i < kAucBuckets; ++i) {
    counted += before.positive_histogram(i) + before.negative_histogram(i);
  }
  EXPECT_EQ(counted, n_eval);

  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    cluster.traffic[0] = cluster.traffic[1] = Traffic();
    const RunClosureResponse r = RunSplit(**trainer, TRAIN, epoch, 0, 2048);
    EXPECT_EQ(r.steps(), 32);
    EXPECT_TRUE(r.positive_histogram().empty());  // TRAIN: no histograms
    // One round trip per PS per step: the first step's pull, then each
    // step's push carrying the next step's pull (the last push alone);
    // embedding tables are only looked up, never pulled whole.
    for (const Traffic& t : cluster.traffic) {
      EXPECT_EQ(t.pulls, 1);
      EXPECT_EQ(t.pushes, 32);
      EXPECT_EQ(t.pushes_with_pull, 31);
      for (const std::string& name : t.whole_reads) EXPECT_THAT(name, Not(HasSubstr("embedding/")));
    }
  }
  // The hash table's rows were created on both PS.
  for (int ps = 0; ps < 2; ++ps) {
    StatsResponse stats;
    ASSERT_TRUE(cluster.stores[ps]->Stats(StatsRequest(), &stats).ok());
    for (const VariableStats& v : stats.variables()) {
      if (v.name() == absl::StrCat("embedding/tag/part_", ps)) {
        EXPECT_GT(v.rows(), 0) << v.name();
      }
    }
  }
  const RunClosureResponse after = RunSplit(**trainer, EVAL, 0, 0, n_eval);
  const double loss_before = before.loss_sum() / n_eval;
  const double loss_after = after.loss_sum() / n_eval;
  EXPECT_LT(loss_after, loss_before - 0.04) << "before " << loss_before << " after " << loss_after;
  const double auc = AucFromHistograms(
      std::vector<int64_t>(after.positive_histogram().begin(), after.positive_histogram().end()),
      std::vector<int64_t>(after.negative_histogram().begin(), after.negative_histogram().end()));
  EXPECT_GT(auc, 0.58);  // 0.66 measured; chance is 0.5
}

// Every push carries the version of its step's pull, and the PS's measured
// staleness comes back as the closure's max_push_staleness.
TEST(TrainerTest, PushesCarryTheirPullsVersionAndReportStaleness) {
  const JobSpec spec = CtrSpec();
  for (const bool crowd : {false, true}) {
    Cluster cluster(spec);
    auto trainer = Trainer::Create(spec, cluster.Clients(crowd), cluster.plan.placement);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    const RunClosureResponse r = RunSplit(**trainer, TRAIN, 0, 0, 640);
    EXPECT_EQ(r.steps(), 10);
    for (const Traffic& t : cluster.traffic) {
      EXPECT_EQ(t.pushes_with_version, t.pushes);
      EXPECT_EQ(t.pushes, 10);
    }
    // Alone, nothing lands between a step's pull and push; crowded, one
    // push does on each PS before every step's own.
    EXPECT_EQ(r.max_push_staleness(), crowd ? 1 : 0) << "crowd " << crowd;
  }
}

TEST(TrainerTest, CreateRejectsBadPlacement) {
  const JobSpec spec = CtrSpec();
  Cluster cluster(spec);
  auto placement = cluster.plan.placement;
  placement[0].mutable_shards(1)->set_row_offset(33);  // rows [32, 33) uncovered
  auto t = Trainer::Create(spec, cluster.Clients(), placement);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("embedding/user"));

  placement = cluster.plan.placement;
  placement.erase(std::find_if(placement.begin(), placement.end(),
                               [](const auto& p) { return p.name() == "dense_0/kernel"; }));
  t = Trainer::Create(spec, cluster.Clients(), placement);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("'dense_0/kernel' has no placement"));
}

// A real in-process PS client that corrupts traffic on purpose: from the
// `poison_after`-th push on, the parameters its answers carry (the next
// step's fused pull) get a NaN; or every gradient it sends gets an Inf.
class PoisoningPsClient : public PsClient {
 public:
  enum Mode { kNanParameters, kInfGradients };
  PoisoningPsClient(VariableStore* store, Mode mode, int poison_after)
      : inner_(store), mode_(mode), poison_after_(poison_after) {}
  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override {
    return inner_.CreateVariables(request, response);
  }
  absl::Status Pull(const PullRequest& request, PullResponse* response) override {
    return inner_.Pull(request, response);
  }
  absl::Status Push(const PushRequest& request, PushResponse* response) override {
    ++pushes;
    if (mode_ == kInfGradients) {
      PushRequest bad = request;
      for (NamedTensor& g : *bad.mutable_gradients()) Poison(g.mutable_tensor(), INFINITY);
      return inner_.Push(bad, response);
    }
    absl::Status s = inner_.Push(request, response);
    if (s.ok() && pushes >= poison_after_) {
      for (NamedTensor& t : *response->mutable_pulled()->mutable_tensors()) {
        Poison(t.mutable_tensor(), NAN);
      }
    }
    return s;
  }
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    return inner_.Stats(request, response);
  }
  int pushes = 0;

 private:
  static void Poison(TensorProto* t, float value) {
    if (t->data().size() >= sizeof(float)) std::memcpy(t->mutable_data()->data(), &value, 4);
  }
  InProcessPsClient inner_;
  const Mode mode_;
  const int poison_after_;
};

absl::Status RunClosureOn(Trainer& trainer, int64_t closure_id, int64_t epoch,
                          RunClosureResponse* resp) {
  RunClosureRequest req;
  req.set_closure_id(closure_id);
  req.set_mode(TRAIN);
  req.mutable_split()->set_epoch(epoch);
  req.mutable_split()->set_begin(640);  // step 10 of the epoch (batch 64)
  req.mutable_split()->set_end(2048);
  return trainer.RunClosure(req, resp);
}

TEST(TrainerTest, ANonFiniteLossFailsTheClosureNamingItsGlobalStepBeforeItsPush) {
  const JobSpec spec = CtrSpec();
  Cluster cluster(spec);
  std::vector<std::unique_ptr<PsClient>> clients;
  std::vector<PoisoningPsClient*> ps;
  for (auto& store : cluster.stores) {
    auto c = std::make_unique<PoisoningPsClient>(store.get(), PoisoningPsClient::kNanParameters,
                                                 /*poison_after=*/3);
    ps.push_back(c.get());
    clients.push_back(std::move(c));
  }
  auto trainer = Trainer::Create(spec, std::move(clients), cluster.plan.placement);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  RunClosureResponse resp;
  // Epoch 2 (index 1) of 32 steps each, from step 10: the 3rd push brings
  // NaN parameters to the closure's 4th step, global step 32 + 10 + 3 = 45.
  absl::Status s = RunClosureOn(**trainer, 9, 1, &resp);
  ASSERT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("non-finite loss (nan) at global step 45"),
                                 HasSubstr("epoch 2"), HasSubstr("closure 9")));
  EXPECT_EQ(resp.steps(), 3);
  for (PoisoningPsClient* p : ps) EXPECT_EQ(p->pushes, 3);  // the NaN step pushed nothing
  for (auto& store : cluster.stores) {
    StatsResponse stats;
    ASSERT_TRUE(store->Stats(StatsRequest(), &stats).ok());
    EXPECT_EQ(stats.applied_steps(), 3);
  }
}

TEST(TrainerTest, APushTheServerRefusesAsNonFiniteFailsTheClosureNamingTheStep) {
  const JobSpec spec = CtrSpec();
  Cluster cluster(spec);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (auto& store : cluster.stores) {
    clients.push_back(std::make_unique<PoisoningPsClient>(
        store.get(), PoisoningPsClient::kInfGradients, /*poison_after=*/0));
  }
  auto trainer = Trainer::Create(spec, std::move(clients), cluster.plan.placement);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  RunClosureResponse resp;
  absl::Status s = RunClosureOn(**trainer, 4, 0, &resp);
  ASSERT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), AllOf(HasSubstr("non-finite gradient at global step 10"),
                                 HasSubstr("refused by the PS"), HasSubstr("inf")));
  EXPECT_EQ(resp.steps(), 0);
  for (auto& store : cluster.stores) {
    StatsResponse stats;
    ASSERT_TRUE(store->Stats(StatsRequest(), &stats).ok());
    EXPECT_EQ(stats.applied_steps(), 0);
  }
}

}  // namespace
}  // namespace pscluster

namespace pscluster {
namespace {

std::vector<float> Floats(const TensorProto& t) {
  std::vector<float> v(t.data().size() / sizeof(float));
  std::memcpy(v.data(), t.data().data(), t.data().size());
  return v;
}

// PREDICT returns the model's outputs for exactly the split's rows (their
// embedding rows looked up on the PS), pushes nothing, and agrees with EVAL:
// the log-loss of its logits against the rows' labels is EVAL's.
TEST(TrainerTest, PredictReturnsTheSplitsOutputsAndAgreesWithEval) {
  const JobSpec spec = CtrSpec();
  Cluster cluster(spec);
  auto trainer = Trainer::Create(spec, cluster.Clients(), cluster.plan.placement);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (int64_t epoch = 0; epoch < 2; ++epoch) RunSplit(**trainer, TRAIN, epoch, 0, 2048);
  cluster.traffic[0] = cluster.traffic[1] = Traffic();

  // 150 rows: two full steps of 64 and a short one.
  const RunClosureResponse whole = RunSplit(**trainer, PREDICT, 0, 10, 160);
  EXPECT_EQ(whole.first_row(), 10);
  EXPECT_EQ(whole.examples(), 150);
  ASSERT_EQ(whole.predictions().dtype(), DT_FLOAT32);
  ASSERT_EQ(whole.predictions().shape_size(), 2);
  EXPECT_EQ(whole.predictions().shape(0), 150);
  EXPECT_EQ(whole.predictions().shape(1), 1);
  const std::vector<float> logits = Floats(whole.predictions());
  ASSERT_EQ(logits.size(), 150u);
  for (const Traffic& t : cluster.traffic) {
    EXPECT_EQ(t.pushes, 0);
    EXPECT_GE(t.pulls, 3);  // dense once, embedding rows every step
  }

  // The same rows cut differently give the same outputs.
  const std::vector<float> a = Floats(RunSplit(**trainer, PREDICT, 0, 10, 90).predictions());
  const std::vector<float> b = Floats(RunSplit(**trainer, PREDICT, 0, 90, 160).predictions());
  std::vector<float> joined = a;
  joined.insert(joined.end(), b.begin(), b.end());
  ASSERT_EQ(joined.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(joined[i], logits[i], 1e-5) << i;

  // EVAL's summed log-loss over the same rows, from the logits and labels.
  absl::StatusOr<Dataset> eval = LoadDataset(spec.data.eval, spec.model);
  ASSERT_TRUE(eval.ok()) << eval.status();
  double loss = 0;
  for (int64_t i = 0; i < 150; ++i) {
    const double p = 1 / (1 + std::exp(-static_cast<double>(logits[i])));
    loss -= eval->y[10 + i] == 1 ? std::log(p) : std::log(1 - p);
  }
  const RunClosureResponse evaluated = RunSplit(**trainer, EVAL, 0, 10, 160);
  EXPECT_NEAR(loss, evaluated.loss_sum(), 1e-3 * evaluated.loss_sum());
  EXPECT_FALSE(evaluated.has_predictions());
}

TEST(TrainerTest, PredictRefusesASplitOutsideTheRows) {
  const JobSpec spec = CtrSpec();
  Cluster cluster(spec);
  auto trainer = Trainer::Create(spec, cluster.Clients(), cluster.plan.placement);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  RunClosureRequest req;
  req.set_mode(PREDICT);
  req.mutable_split()->set_begin(500);
  req.mutable_split()->set_end(600);
  RunClosureResponse resp;
  const absl::Status s = (*trainer)->RunClosure(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("outside the eval set of 512"));
}

}  // namespace
}  // namespace pscluster
