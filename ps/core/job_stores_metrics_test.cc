#include "ps/core/job_stores_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "ps/core/memory_budget.h"

namespace pscluster {
namespace {

CreateVariablesRequest OneVariable(const std::string& job, const std::string& name, int64_t size,
                                   const std::string& optimizer) {
  CreateVariablesRequest req;
  req.set_job(job);
  VariableSpecProto* spec = req.add_variables();
  spec->set_name(name);
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(size);
  spec->mutable_initializer()->set_type("constant");
  spec->mutable_optimizer()->set_type(optimizer);
  spec->mutable_optimizer()->set_learning_rate(0.1f);
  spec->mutable_optimizer()->set_momentum(0.9f);
  return req;
}

// name{sorted labels} -> value.
std::map<std::string, double> Values(const JobStoresMetrics& metrics) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : metrics.Collect()) {
    for (const prometheus::ClientMetric& m : f.metric) {
      std::string key = f.name;
      for (const auto& l : m.label) key += "," + l.name + "=" + l.value;
      out[key] = m.gauge.value;
    }
  }
  return out;
}

TEST(JobStoresMetricsTest, ReportsBytesPerKindAndVariableOverJobsWithoutJobLabels) {
  JobStores stores;
  JobStoresMetrics metrics(&stores);
  EXPECT_EQ(Values(metrics)["pscluster_ps_jobs"], 0);
  EXPECT_EQ(Values(metrics)["pscluster_ps_held_bytes,kind=parameters"], 0);

  CreateVariablesResponse created;
  ASSERT_TRUE(stores.CreateVariables(OneVariable("job-a", "w", 100, "sgd"), &created).ok());
  ASSERT_TRUE(stores.CreateVariables(OneVariable("job-b", "w", 50, "momentum"), &created).ok());
  ASSERT_TRUE(stores.CreateVariables(OneVariable("job-b", "b", 10, "momentum"), &created).ok());
  std::map<std::string, double> v = Values(metrics);
  EXPECT_EQ(v["pscluster_ps_jobs"], 2);
  EXPECT_EQ(v["pscluster_ps_variable_bytes,kind=parameters,variable=w"], 150 * 4);
  EXPECT_EQ(v["pscluster_ps_variable_bytes,kind=parameters,variable=b"], 10 * 4);
  EXPECT_GT(v["pscluster_ps_variable_bytes,kind=slots,variable=b"], 0);  // momentum
  EXPECT_EQ(v["pscluster_ps_held_bytes,kind=parameters"], 160 * 4);
  EXPECT_EQ(v["pscluster_ps_held_bytes,kind=slots"],
            v["pscluster_ps_variable_bytes,kind=slots,variable=w"] +
                v["pscluster_ps_variable_bytes,kind=slots,variable=b"]);
  for (const auto& [key, value] : v) EXPECT_EQ(key.find("job-"), std::string::npos) << key;

  EndJobRequest end;
  end.set_job("job-b");
  EndJobResponse ended;
  ASSERT_TRUE(stores.EndJob(end, &ended).ok());
  v = Values(metrics);
  EXPECT_EQ(v["pscluster_ps_jobs"], 1);
  EXPECT_EQ(v["pscluster_ps_held_bytes,kind=parameters"], 100 * 4);
  EXPECT_EQ(v.count("pscluster_ps_variable_bytes,kind=parameters,variable=b"), 0u);
}

TEST(JobStoresMetricsTest, ReportsTheMemoryLimitBesideTheBytesHeld) {
  VariableStore::Options options;
  options.memory_budget = std::make_shared<MemoryBudget>(1 << 20);
  JobStores stores(options);
  CreateVariablesResponse resp;
  ASSERT_TRUE(stores.CreateVariables(OneVariable("a", "w", 100, "sgd"), &resp).ok());
  JobStoresMetrics metrics(&stores);
  std::map<std::string, double> v = Values(metrics);
  EXPECT_EQ(v["pscluster_ps_memory_limit_bytes"], 1 << 20);
  EXPECT_EQ(v["pscluster_ps_held_bytes,kind=parameters"], 400);
  // No limit, no gauge.
  JobStores unlimited;
  EXPECT_EQ(Values(JobStoresMetrics(&unlimited)).count("pscluster_ps_memory_limit_bytes"), 0);
}

}  // namespace
}  // namespace pscluster
