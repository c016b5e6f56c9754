#include "coordinator/core/coordinator_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace pscluster {
namespace {

// name{label=value,...} -> value, over one scrape.
std::map<std::string, double> Scrape(const CoordinatorMetrics& metrics) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : metrics.Collect()) {
    for (const prometheus::ClientMetric& m : f.metric) {
      std::string key = f.name;
      for (const auto& l : m.label) key += "," + l.name + "=" + l.value;
      EXPECT_EQ(out.count(key), 0u) << key;
      out[key] = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return out;
}

JobStatusProto Job(const std::string& id, JobState state) {
  JobStatusProto j;
  j.set_job_id(id);
  j.set_state(state);
  return j;
}

TEST(CoordinatorMetricsTest, CountsEventsAcrossJobs) {
  CoordinatorMetrics metrics;
  metrics.ClosuresScheduled(10);
  metrics.TrainingDone(5, 320);
  metrics.TrainingDone(3, 192);
  metrics.ClosureRetried();
  metrics.ClosureFailed();
  metrics.PsRecovered();
  metrics.StepsLost(4);
  metrics.StepsLost(0);
  metrics.WorkerLost();
  metrics.CheckpointCommitted(absl::Milliseconds(250), 4096);
  metrics.CheckpointCommitted(absl::Milliseconds(500), 8192);
  std::map<std::string, double> v = Scrape(metrics);
  EXPECT_EQ(v["pscluster_closures_scheduled_total"], 10);
  EXPECT_EQ(v["pscluster_job_steps_total"], 8);
  EXPECT_EQ(v["pscluster_job_examples_total"], 512);
  EXPECT_EQ(v["pscluster_closures_retried_total"], 1);
  EXPECT_EQ(v["pscluster_closures_failed_total"], 1);
  EXPECT_EQ(v["pscluster_ps_recoveries_total"], 1);
  EXPECT_EQ(v["pscluster_lost_steps_total"], 4);
  EXPECT_EQ(v["pscluster_workers_lost_total"], 1);
  EXPECT_EQ(v["pscluster_checkpoints_total"], 2);
  EXPECT_EQ(v["pscluster_checkpoint_duration_seconds"], 0.5);  // the last one
  EXPECT_EQ(v["pscluster_checkpoint_bytes"], 8192);
  // Without a job source there are no job gauges.
  EXPECT_EQ(v.count("pscluster_jobs,state=running"), 0u);
}

TEST(CoordinatorMetricsTest, JobGaugesComeFromTheRunningJobAtScrapeTime) {
  absl::Time now = absl::FromUnixSeconds(1000);
  CoordinatorMetrics metrics([&now] { return now; });
  std::vector<JobStatusProto> jobs;
  metrics.SetJobSource([&jobs] { return jobs; });

  std::map<std::string, double> v = Scrape(metrics);
  EXPECT_EQ(v["pscluster_jobs,state=queued"], 0);
  EXPECT_EQ(v["pscluster_queue_depth"], 0);
  EXPECT_EQ(v["pscluster_job_examples_per_second"], 0);
  EXPECT_EQ(v["pscluster_checkpoint_age_seconds"], 0);
  EXPECT_EQ(v.count("pscluster_job_train_loss"), 0u);  // no job has trained

  JobStatusProto done = Job("a", SUCCEEDED);
  done.set_steps(100);
  done.set_train_loss(0.3);
  done.add_epochs()->set_epoch(1);
  done.set_eval_accuracy(0.8);
  done.set_eval_loss(0.5);
  JobStatusProto running = Job("b", RUNNING);
  running.set_steps(10);
  running.set_examples_per_sec(1234.5);
  running.set_train_loss(0.9);
  jobs = {done, running, Job("c", QUEUED), Job("d", QUEUED), Job("e", FAILED)};
  metrics.JobStarted(/*checkpoints=*/true);
  now += absl::Seconds(30);
  v = Scrape(metrics);
  EXPECT_EQ(v["pscluster_jobs,state=queued"], 2);
  EXPECT_EQ(v["pscluster_jobs,state=running"], 1);
  EXPECT_EQ(v["pscluster_jobs,state=succeeded"], 1);
  EXPECT_EQ(v["pscluster_jobs,state=failed"], 1);
  EXPECT_EQ(v["pscluster_jobs,state=cancelled"], 0);
  EXPECT_EQ(v["pscluster_queue_depth"], 2);
  EXPECT_EQ(v["pscluster_job_examples_per_second"], 1234.5);
  EXPECT_EQ(v["pscluster_job_train_loss"], 0.9);
  EXPECT_EQ(v.count("pscluster_job_eval_metric,metric=accuracy"), 0u);  // no epoch yet
  EXPECT_EQ(v["pscluster_checkpoint_age_seconds"], 30);                 // since the job started
  metrics.CheckpointCommitted(absl::Seconds(1), 10);
  now += absl::Seconds(5);
  EXPECT_EQ(Scrape(metrics)["pscluster_checkpoint_age_seconds"], 5);

  // Once it ends, the last trained job's values stay; the rate and age drop.
  jobs[1].set_state(SUCCEEDED);
  jobs[1].add_epochs()->set_epoch(1);
  jobs[1].set_eval_accuracy(0.75);
  jobs[1].set_eval_loss(0.6);
  jobs[1].set_eval_auc(0.9);
  v = Scrape(metrics);
  EXPECT_EQ(v["pscluster_job_examples_per_second"], 0);
  EXPECT_EQ(v["pscluster_checkpoint_age_seconds"], 0);
  EXPECT_EQ(v["pscluster_job_train_loss"], 0.9);
  EXPECT_EQ(v["pscluster_job_eval_metric,metric=accuracy"], 0.75);
  EXPECT_EQ(v["pscluster_job_eval_metric,metric=loss"], 0.6);
  EXPECT_EQ(v["pscluster_job_eval_metric,metric=auc"], 0.9);
  for (const auto& [key, value] : v) EXPECT_EQ(key.find("job_id"), std::string::npos) << key;
}

TEST(CoordinatorMetricsTest, NoCheckpointAgeForAJobWithoutCheckpoints) {
  CoordinatorMetrics metrics;
  metrics.SetJobSource([] { return std::vector<JobStatusProto>{Job("a", RUNNING)}; });
  metrics.JobStarted(/*checkpoints=*/false);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(Scrape(metrics)["pscluster_checkpoint_age_seconds"], 0);
}

}  // namespace
}  // namespace pscluster
