// CoordinatorMetrics: the coordinator's job metrics, for Prometheus.
//
// Two sources:
// - Event counters and gauges, fed by JobRunner where things happen (every
//   job of the coordinator shares them):
//     pscluster_job_steps_total, pscluster_job_examples_total (training),
//     pscluster_closures_{scheduled,retried,failed}_total,
//     pscluster_ps_recoveries_total, pscluster_lost_steps_total,
//     pscluster_workers_lost_total, pscluster_checkpoints_total,
//     pscluster_checkpoint_duration_seconds, pscluster_checkpoint_bytes (last),
//     pscluster_cluster_tasks_healthy{task_type="ps|worker"} (ClusterProbe).
// - At scrape time, every job's status (SetJobSource):
//     pscluster_jobs{state}, pscluster_queue_depth,
//     pscluster_job_examples_per_second (running job; 0 when none runs),
//     pscluster_job_train_loss, pscluster_job_eval_metric{metric} (the
//     running job's, else the last job that trained: the final values stay
//     visible after a job ends),
//     pscluster_checkpoint_age_seconds (since the running job's last
//     committed checkpoint, or its start while it has none; 0 when no job
//     runs or the running one takes no checkpoints).
// No job id or closure id is a label. Thread-safe.
#ifndef PSCLUSTER_COORDINATOR_CORE_COORDINATOR_METRICS_H_
#define PSCLUSTER_COORDINATOR_CORE_COORDINATOR_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "protos/coordinator.pb.h"

namespace pscluster {

class CoordinatorMetrics : public prometheus::Collectable {
 public:
  // `now` is the clock of the checkpoint age (tests pass a fake one).
  explicit CoordinatorMetrics(std::function<absl::Time()> now = [] { return absl::Now(); })
      : now_(std::move(now)) {}

  // Every job's status, asked at each scrape (JobManager::List). Call once,
  // before the metrics are served; unset, the job gauges are left out.
  void SetJobSource(std::function<std::vector<JobStatusProto>()> jobs) ABSL_LOCKS_EXCLUDED(mu_);

  // A job started running; `checkpoints`: it takes checkpoints (its
  // checkpoint age counts from now until its first one commits).
  void JobStarted(bool checkpoints) ABSL_LOCKS_EXCLUDED(mu_);
  // Closures put on a phase's queue (training and eval).
  void ClosuresScheduled(int64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // A closure failure that will be retried.
  void ClosureRetried() ABSL_LOCKS_EXCLUDED(mu_);
  // A closure that failed for good (it fails its job).
  void ClosureFailed() ABSL_LOCKS_EXCLUDED(mu_);
  // A training closure finished.
  void TrainingDone(int64_t steps, int64_t examples) ABSL_LOCKS_EXCLUDED(mu_);
  // Training steps rolled back (a PS recovery, or a resume behind the log).
  void StepsLost(int64_t steps) ABSL_LOCKS_EXCLUDED(mu_);
  void PsRecovered() ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLost() ABSL_LOCKS_EXCLUDED(mu_);
  // A checkpoint committed, `took` long, of `bytes` over all its files.
  void CheckpointCommitted(absl::Duration took, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Tasks answering their health checks now.
  void ClusterHealth(int ps_healthy, int workers_healthy) ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<prometheus::MetricFamily> Collect() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::function<std::vector<JobStatusProto>()> jobs_ ABSL_GUARDED_BY(mu_);
  double steps_ ABSL_GUARDED_BY(mu_) = 0;
  double examples_ ABSL_GUARDED_BY(mu_) = 0;
  double scheduled_ ABSL_GUARDED_BY(mu_) = 0;
  double retried_ ABSL_GUARDED_BY(mu_) = 0;
  double failed_ ABSL_GUARDED_BY(mu_) = 0;
  double lost_steps_ ABSL_GUARDED_BY(mu_) = 0;
  double ps_recoveries_ ABSL_GUARDED_BY(mu_) = 0;
  double workers_lost_ ABSL_GUARDED_BY(mu_) = 0;
  double checkpoints_ ABSL_GUARDED_BY(mu_) = 0;
  double checkpoint_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double checkpoint_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Of the job running now (JobStarted), for the checkpoint age.
  bool running_checkpoints_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_checkpoint_ ABSL_GUARDED_BY(mu_);
  int ps_healthy_ ABSL_GUARDED_BY(mu_) = 0;
  int workers_healthy_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_COORDINATOR_METRICS_H_
