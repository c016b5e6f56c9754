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
  EXPECT_FALSE(j.contains("error"));
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
  EXPECT_TRUE(j["epochs"].is_array());
}

}  // namespace
}  // namespace pscluster
