#include "client/result_json.h"

#include "gtest/gtest.h"

namespace pscluster {
namespace {

TEST(ResultJsonTest, CarriesStatusRunAndPids) {
  RunResult r;
  r.ps = 2;
  r.workers = 3;
  r.status.set_name("mnist");
  r.status.set_job_id("job-1");
  r.status.set_state(SUCCEEDED);
  r.status.set_train_loss(0.25);
  r.status.set_eval_accuracy(0.875);
  r.status.set_steps(94);
  r.status.set_examples(6000);
  r.status.set_backend("cpu");
  EpochResult* e = r.status.add_epochs();
  e->set_epoch(1);
  e->set_eval_accuracy(0.875);
  r.pids = ClusterPids{{11, 12}, {21, 22, 23}, 31};
  r.restarts = std::map<std::string, int>{{"ps-0", 0}, {"worker-1", 2}, {"coordinator", 1}};
  r.metrics = ClusterMetricsAddresses{{"127.0.0.1:9001", "127.0.0.1:9002"}, {"127.0.0.1:9003"},
                                      "127.0.0.1:9000"};

  // What a consumer does: parse the printed text.
  const nlohmann::json j = nlohmann::json::parse(RunResultJson(r).dump());
  EXPECT_EQ(j["job"], "mnist");
  EXPECT_EQ(j["state"], "SUCCEEDED");
  EXPECT_EQ(j["strategy"], "parameter_server");
  EXPECT_EQ(j["ps"], 2);
  EXPECT_EQ(j["workers"], 3);
  EXPECT_DOUBLE_EQ(j["train_loss"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["eval_accuracy"].get<double>(), 0.875);
  EXPECT_EQ(j["steps"], 94);
  EXPECT_EQ(j["examples"], 6000);
  EXPECT_EQ(j["backend"], "cpu");
  ASSERT_EQ(j["epochs"].size(), 1u);
  EXPECT_EQ(j["epochs"][0]["epoch"], 1);
  EXPECT_EQ(j["pids"]["ps"], nlohmann::json({11, 12}));
  EXPECT_EQ(j["pids"]["worker"], nlohmann::json({21, 22, 23}));
  EXPECT_EQ(j["pids"]["coordinator"], 31);
  EXPECT_EQ(j["restarts"], nlohmann::json({{"ps-0", 0}, {"worker-1", 2}, {"coordinator", 1}}));
  EXPECT_EQ(j["metrics"]["ps"], nlohmann::json({"127.0.0.1:9001", "127.0.0.1:9002"}));
  EXPECT_EQ(j["metrics"]["worker"], nlohmann::json({"127.0.0.1:9003"}));
  EXPECT_EQ(j["metrics"]["coordinator"], "127.0.0.1:9000");
  EXPECT_FALSE(j.contains("error"));
}

// eval: sidecar / none: the coordinator measured no eval metric, and the
// result does not claim one.
TEST(ResultJsonTest, SidecarEvalClaimsNoEvalMetric) {
  RunResult r;
  r.status.set_state(SUCCEEDED);
  r.status.set_eval_mode("sidecar");
  r.status.add_epochs()->set_epoch(1);
  const nlohmann::json j = nlohmann::json::parse(RunResultJson(r).dump());
  EXPECT_EQ(j["eval_mode"], "sidecar");
  EXPECT_TRUE(j["eval_accuracy"].is_null());
  EXPECT_TRUE(j["eval_loss"].is_null());
  EXPECT_TRUE(j["eval_auc"].is_null());
  ASSERT_EQ(j["epochs"].size(), 1u);
  EXPECT_FALSE(j["epochs"][0].contains("eval_accuracy"));
  r.status.set_eval_mode("inline");
  EXPECT_EQ(RunResultJson(r)["eval_accuracy"], 0.0);
}

TEST(ResultJsonTest, ErrorAndNoPidsWithoutACluster) {
  RunResult r;
  r.strategy = "one_device";
  r.status.set_state(FAILED);
  r.status.set_error("boom");
  const nlohmann::json j = RunResultJson(r);
  EXPECT_EQ(j["state"], "FAILED");
  EXPECT_EQ(j["error"], "boom");
  EXPECT_EQ(j["strategy"], "one_device");
  EXPECT_FALSE(j.contains("pids"));
  EXPECT_FALSE(j.contains("restarts"));
  EXPECT_FALSE(j.contains("metrics"));
  EXPECT_TRUE(j["epochs"].is_array());
}

// `psctl status -o json` and `psctl local -o json` share one schema: every
// key of a job's status is in the run result, with the same value, and
// int64 fields are JSON numbers (protobuf's printer would quote them).
TEST(ResultJsonTest, StatusIsTheSameShapeAsTheRunResultWithNumbers) {
  RunResult r;
  r.status.set_job_id("job-2");
  r.status.set_state(QUEUED);
  r.status.set_queue_position(3);
  r.status.set_steps(int64_t{1} << 40);
  r.status.set_already_complete(true);
  const nlohmann::json status = JobStatusJson(r.status);
  const nlohmann::json run = RunResultJson(r);
  for (const auto& [key, value] : status.items()) {
    ASSERT_TRUE(run.contains(key)) << key;
    EXPECT_EQ(run[key], value) << key;
  }
  EXPECT_EQ(status["state"], "QUEUED");
  EXPECT_TRUE(status["queue_position"].is_number_integer());
  EXPECT_EQ(status["queue_position"], 3);
  EXPECT_EQ(status["steps"], int64_t{1} << 40);
  EXPECT_TRUE(status["resumed_from_checkpoint"].is_number_integer());
  EXPECT_EQ(status["already_complete"], true);
  EXPECT_FALSE(status.contains("strategy"));
}

TEST(ResultJsonTest, BatchesAndLearningRateInStatusAndDescribe) {
  JobStatusProto s;
  s.set_per_replica_batch(32);
  s.set_global_batch(64);
  s.set_replicas(2);
  s.set_learning_rate("0.2, cosine decay over 1000 steps to 0, after 100 warmup steps from 0");
  const nlohmann::json status = JobStatusJson(s);
  EXPECT_EQ(status["per_replica_batch"], 32);
  EXPECT_EQ(status["global_batch"], 64);
  EXPECT_EQ(status["replicas"], 2);
  EXPECT_EQ(status["learning_rate"], s.learning_rate());
  DescribeJobResponse d;
  d.set_per_replica_batch(32);
  d.set_global_batch(64);
  d.set_replicas(2);
  d.set_learning_rate("0.01");
  const nlohmann::json describe = DescribeJson(d);
  EXPECT_EQ(describe["per_replica_batch"], 32);
  EXPECT_EQ(describe["global_batch"], 64);
  EXPECT_EQ(describe["replicas"], 2);
  EXPECT_EQ(describe["learning_rate"], "0.01");
}

TEST(ResultJsonTest, ListEventsAndSubmit) {
  ListJobsResponse list;
  list.add_jobs()->set_job_id("a");
  list.add_jobs()->set_job_id("b");
  const nlohmann::json jobs = JobListJson(list);
  ASSERT_EQ(jobs["jobs"].size(), 2u);
  EXPECT_EQ(jobs["jobs"][1]["job_id"], "b");

  GetJobEventsResponse events;
  JobEvent* e = events.add_events();
  e->set_unix_seconds(1700000000.5);
  e->set_kind("retry");
  e->set_message("closure 7 retried");
  const nlohmann::json log = JobEventsJson("a", events);
  EXPECT_EQ(log["job_id"], "a");
  ASSERT_EQ(log["events"].size(), 1u);
  EXPECT_DOUBLE_EQ(log["events"][0]["unix_seconds"].get<double>(), 1700000000.5);
  EXPECT_EQ(log["events"][0]["kind"], "retry");

  SubmitJobResponse submitted;
  submitted.set_job_id("a");
  submitted.set_queue_position(2);
  EXPECT_EQ(SubmitJson(submitted), nlohmann::json({{"job_id", "a"}, {"queue_position", 2}}));
}

}  // namespace
}  // namespace pscluster
