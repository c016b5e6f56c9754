#include "coordinator/core/predict_runner.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/job_runner_test_util.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using job_runner_test_util::Cluster;
using job_runner_test_util::FastRetries;
using job_runner_test_util::ForWorkers;
using job_runner_test_util::FreshDir;
using job_runner_test_util::TestRoot;
using job_runner_test_util::WithCheckpoints;

constexpr int kOutputs = 3;

// Row r's prediction: (10r, 10r + 1, 10r + 2).
float Value(int64_t row, int k) { return static_cast<float>(10 * row + k); }

// A worker answering PREDICT closures with Value(row, k); it can die (every
// call and health check UNAVAILABLE from then on) after a number of
// closures, or answer with the wrong first row.
class PredictWorker : public WorkerClient {
 public:
  PredictWorker(std::string name, int64_t rows) : name_(std::move(name)), rows_(rows) {}
  std::string address() const override { return name_; }
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (dead_) return absl::UnavailableError("connection refused");
    job_ = request.job_id();
    response->set_backend("fake");
    response->set_eval_examples(rows_);
    return absl::OkStatus();
  }
  absl::Status RunClosure(const RunClosureRequest& request, absl::Duration,
                          RunClosureResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (dead_) return absl::UnavailableError("connection refused");
    if (request.mode() != PREDICT || request.job_id() != job_) {
      return absl::InvalidArgumentError("not a predict closure of the job set up");
    }
    if (die_after_ >= 0 && answered_ >= die_after_) {
      dead_ = true;  // killed mid-closure: no answer
      died_.Notify();
      return absl::UnavailableError("connection reset");
    }
    if (wait_for_ != nullptr) {
      // Holds its first closure until the other worker died, so that the
      // other one surely gets work (bounded: a hung test fails, not hangs).
      mu_.Unlock();
      const bool died = wait_for_->died_.WaitForNotificationWithTimeout(absl::Seconds(30));
      mu_.Lock();
      if (!died) return absl::InternalError("the other worker never died");
    }
    ++answered_;
    const DataSplit& s = request.split();
    response->set_first_row(s.begin() + (wrong_first_row_ ? 1 : 0));
    TensorProto* t = response->mutable_predictions();
    t->set_dtype(DT_FLOAT32);
    t->add_shape(s.end() - s.begin());
    t->add_shape(kOutputs);
    std::vector<float> v;
    for (int64_t r = s.begin(); r < s.end(); ++r) {
      for (int k = 0; k < kOutputs; ++k) v.push_back(Value(r, k));
    }
    t->set_data(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    response->set_examples(s.end() - s.begin());
    return absl::OkStatus();
  }
  absl::Status Ping(const PingRequest&, PingResponse*) override {
    absl::MutexLock lock(&mu_);
    return dead_ ? absl::UnavailableError("connection refused") : absl::OkStatus();
  }
  bool dead() {
    absl::MutexLock lock(&mu_);
    return dead_;
  }
  int answered() {
    absl::MutexLock lock(&mu_);
    return answered_;
  }

  absl::Mutex mu_;
  std::string name_;
  int64_t rows_;
  std::string job_;
  int die_after_ = -1;  // closures answered before it dies; -1: never
  absl::Notification died_;
  PredictWorker* wait_for_ = nullptr;  // answers only once this one died
  bool wrong_first_row_ = false;
  bool dead_ = false;
  int answered_ = 0;
};

// PS always up; a worker answers its health check while it is alive.
class Health : public HealthChecker {
 public:
  explicit Health(std::vector<PredictWorker*> workers) : workers_(std::move(workers)) {}
  absl::StatusOr<uint64_t> CheckPs(int index) override { return static_cast<uint64_t>(index + 1); }
  absl::Status CheckWorker(int index) override {
    return workers_[index]->dead() ? absl::UnavailableError("down") : absl::OkStatus();
  }
  std::vector<PredictWorker*> workers_;
};

class PredictRunnerTest : public ::testing::Test {
 protected:
  // Trains the in-process cluster's job for one epoch with a checkpoint
  // at its end, as a job run before `psctl predict` would.
  void SetUp() override {
    dir_ = FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    spec_ = ForWorkers(WithCheckpoints(dir_, /*every_steps=*/0, /*epochs=*/1), 2);
    JobRunner trainer("trained", spec_, {&cluster_.ps0, &cluster_.ps1},
                      {&cluster_.w0, &cluster_.w1}, FastRetries());
    ASSERT_TRUE(trainer.Run().ok());
    ASSERT_GE(trainer.Status().checkpoints(), 1);
  }

  PredictRunnerOptions Options() const {
    PredictRunnerOptions o;
    o.checkpoint_root = TestRoot();
    o.retry_backoff = absl::Milliseconds(1);
    o.closure_rows = 5;
    return o;
  }

  absl::StatusOr<PredictResult> Predict(std::vector<WorkerClient*> workers,
                                        PredictRunnerOptions options) {
    PredictRunner run("predict-1", spec_, {&cluster_.ps0, &cluster_.ps1}, std::move(workers),
                      std::move(options));
    return run.Run();
  }

  // Every row of `table` not taken yet, checked in input order against
  // Value(): they must be all the rows.
  static void ExpectEveryRowOnce(PredictionTable& table, int64_t rows) {
    ASSERT_TRUE(table.Verify().ok()) << table.Verify();
    ASSERT_EQ(table.outputs(), kOutputs);
    int64_t next = 0;
    for (const PredictionTable::Split& s : table.TakeReady()) {
      EXPECT_EQ(s.first_row, next);
      ASSERT_EQ(static_cast<int64_t>(s.values.size()), s.rows * kOutputs);
      for (int64_t i = 0; i < s.rows; ++i) {
        for (int k = 0; k < kOutputs; ++k) EXPECT_EQ(s.values[i * kOutputs + k], Value(next + i, k));
      }
      next += s.rows;
    }
    EXPECT_EQ(next, rows);
  }

  std::string dir_;
  JobSpec spec_;
  Cluster cluster_;
};

TEST_F(PredictRunnerTest, EveryRowOnceInInputOrder) {
  PredictWorker w0("p0", 53), w1("p1", 53);
  std::vector<PredictProgress> seen;
  PredictRunnerOptions o = Options();
  absl::Mutex mu;
  o.on_progress = [&](const PredictProgress& p, PredictionTable&) {
    absl::MutexLock lock(&mu);
    seen.push_back(p);
  };
  absl::StatusOr<PredictResult> r = Predict({&w0, &w1}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectEveryRowOnce(*r->table, 53);
  EXPECT_EQ(r->progress.closures, 11);
  EXPECT_EQ(r->progress.closures_done, 11);
  EXPECT_EQ(r->progress.retries, 0);
  EXPECT_EQ(r->progress.duplicates, 0);
  EXPECT_EQ(w0.answered() + w1.answered(), 11);
  // The job's final checkpoint (its first), at its last step.
  EXPECT_EQ(r->checkpoint_id, 0);
  EXPECT_EQ(r->global_step, 10);
  // One report before dispatch, one per closure.
  ASSERT_EQ(seen.size(), 12u);
  EXPECT_EQ(seen.front().closures_done, 0);
  EXPECT_EQ(seen.back().rows_done, 53);
  // The run's namespace is gone from the PS: nothing of it stays.
  EndJobResponse ended;
  EndJobRequest end;
  end.set_job("predict-1");
  ASSERT_TRUE(cluster_.ps0.EndJob(end, &ended).ok());
  EXPECT_FALSE(ended.existed());
}

TEST_F(PredictRunnerTest, RowsStreamedFromProgressComeOnceInOrder) {
  PredictWorker w0("p0", 53), w1("p1", 53);
  PredictRunnerOptions o = Options();
  absl::Mutex mu;  // TakeReady-and-append, serialized as a caller must
  std::vector<float> streamed;
  o.on_progress = [&](const PredictProgress&, PredictionTable& table) {
    absl::MutexLock lock(&mu);
    for (const PredictionTable::Split& s : table.TakeReady()) {
      EXPECT_EQ(static_cast<int64_t>(streamed.size()), s.first_row * kOutputs);
      streamed.insert(streamed.end(), s.values.begin(), s.values.end());
    }
  };
  absl::StatusOr<PredictResult> r = Predict({&w0, &w1}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (const PredictionTable::Split& s : r->table->TakeReady()) {  // what is left
    EXPECT_EQ(static_cast<int64_t>(streamed.size()), s.first_row * kOutputs);
    streamed.insert(streamed.end(), s.values.begin(), s.values.end());
  }
  ASSERT_EQ(streamed.size(), 53u * kOutputs);
  for (int64_t row = 0; row < 53; ++row) {
    for (int k = 0; k < kOutputs; ++k) EXPECT_EQ(streamed[row * kOutputs + k], Value(row, k));
  }
  // The last answer's report took every row.
  EXPECT_EQ(r->table->rows_taken(), 53);
}

TEST_F(PredictRunnerTest, AWorkerDyingMidRunLosesNoRowAndRepeatsNone) {
  PredictWorker w0("p0", 53), w1("p1", 53);
  w0.die_after_ = 2;  // answers two closures, dies in its third
  w1.wait_for_ = &w0;
  Health health({&w0, &w1});
  PredictRunnerOptions o = Options();
  o.health = &health;
  spec_.fault_tolerance.health_check_interval_s = 0.01;
  absl::StatusOr<PredictResult> r = Predict({&w0, &w1}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectEveryRowOnce(*r->table, 53);
  EXPECT_TRUE(w0.dead());
  EXPECT_EQ(w0.answered(), 2);
  EXPECT_EQ(w1.answered(), 9);
  EXPECT_GE(r->progress.retries, 1);
  EXPECT_EQ(r->progress.duplicates, 0);
}

TEST_F(PredictRunnerTest, SeveralClosuresPerRpcKeepEachRowOnce) {
  spec_.train.closures_per_rpc = 3;
  spec_.train.closures_per_worker = 2;
  PredictWorker w0("p0", 53), w1("p1", 53);
  absl::StatusOr<PredictResult> r = Predict({&w0, &w1}, Options());
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectEveryRowOnce(*r->table, 53);
  EXPECT_EQ(w0.answered() + w1.answered(), 11);
}

TEST_F(PredictRunnerTest, AMalformedAnswerFailsTheRun) {
  PredictWorker w0("p0", 20);
  w0.wrong_first_row_ = true;
  absl::StatusOr<PredictResult> r = Predict({&w0}, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_NE(r.status().message().find("malformed"), std::string::npos) << r.status();
}

TEST_F(PredictRunnerTest, ADirectoryWithoutCheckpointIsNotFound) {
  PredictWorker w0("p0", 20);
  PredictRunnerOptions o = Options();
  o.checkpoint_dir = FreshDir("empty_ckpt");
  std::filesystem::create_directories(o.checkpoint_dir);
  absl::StatusOr<PredictResult> r = Predict({&w0}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("no committed checkpoint"), std::string::npos);
  EXPECT_EQ(w0.answered(), 0);
}

TEST_F(PredictRunnerTest, NoRowsPredictsNothing) {
  PredictWorker w0("p0", 0);
  absl::StatusOr<PredictResult> r = Predict({&w0}, Options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->table->rows(), 0);
  EXPECT_EQ(r->progress.closures, 0);
}

}  // namespace
}  // namespace pscluster
