#include "coordinator/core/coordinator_metrics.h"

#include <map>
#include <string>
#include <utility>

namespace pscluster {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void Add(MetricFamily* f, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f->type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f->metric.push_back(std::move(m));
}

MetricFamily One(std::string name, std::string help, MetricType type, double value) {
  MetricFamily f = Family(std::move(name), std::move(help), type);
  Add(&f, value);
  return f;
}

}  // namespace

void CoordinatorMetrics::SetJobSource(std::function<std::vector<JobStatusProto>()> jobs) {
  absl::MutexLock lock(&mu_);
  jobs_ = std::move(jobs);
}

void CoordinatorMetrics::JobStarted(bool checkpoints) {
  absl::MutexLock lock(&mu_);
  running_checkpoints_ = checkpoints;
  last_checkpoint_ = now_();
}

void CoordinatorMetrics::ClosuresScheduled(int64_t n) {
  absl::MutexLock lock(&mu_);
  scheduled_ += static_cast<double>(n);
}

void CoordinatorMetrics::ClosureRetried() {
  absl::MutexLock lock(&mu_);
  ++retried_;
}

void CoordinatorMetrics::ClosureFailed() {
  absl::MutexLock lock(&mu_);
  ++failed_;
}

void CoordinatorMetrics::TrainingDone(int64_t steps, int64_t examples) {
  absl::MutexLock lock(&mu_);
  steps_ += static_cast<double>(steps);
  examples_ += static_cast<double>(examples);
}

void CoordinatorMetrics::StepsLost(int64_t steps) {
  if (steps <= 0) return;
  absl::MutexLock lock(&mu_);
  lost_steps_ += static_cast<double>(steps);
}

void CoordinatorMetrics::PsRecovered() {
  absl::MutexLock lock(&mu_);
  ++ps_recoveries_;
}

void CoordinatorMetrics::WorkerLost() {
  absl::MutexLock lock(&mu_);
  ++workers_lost_;
}

void CoordinatorMetrics::CheckpointCommitted(absl::Duration took, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  ++checkpoints_;
  checkpoint_seconds_ = absl::ToDoubleSeconds(took);
  checkpoint_bytes_ = static_cast<double>(bytes);
  last_checkpoint_ = now_();
}

void CoordinatorMetrics::ClusterHealth(int ps_healthy, int workers_healthy) {
  absl::MutexLock lock(&mu_);
  ps_healthy_ = ps_healthy;
  workers_healthy_ = workers_healthy;
}

std::vector<MetricFamily> CoordinatorMetrics::Collect() const {
  std::function<std::vector<JobStatusProto>()> source;
  std::vector<MetricFamily> out;
  bool running_checkpoints;
  absl::Time last_checkpoint;
  {
    absl::MutexLock lock(&mu_);
    source = jobs_;
    running_checkpoints = running_checkpoints_;
    last_checkpoint = last_checkpoint_;
    const MetricType kCounter = MetricType::Counter, kGauge = MetricType::Gauge;
    out.push_back(One("pscluster_job_steps_total", "Training steps of every closure that finished.",
                      kCounter, steps_));
    out.push_back(One("pscluster_job_examples_total",
                      "Training examples of every closure that finished.", kCounter, examples_));
    out.push_back(One("pscluster_closures_scheduled_total",
                      "Closures (training and eval) put on a job's queue.", kCounter, scheduled_));
    out.push_back(One("pscluster_closures_retried_total", "Closure failures that were retried.",
                      kCounter, retried_));
    out.push_back(One("pscluster_closures_failed_total",
                      "Closures that failed for good, failing their job.", kCounter, failed_));
    out.push_back(One("pscluster_ps_recoveries_total",
                      "PS failures healed by restoring a checkpoint.", kCounter, ps_recoveries_));
    out.push_back(One("pscluster_lost_steps_total",
                      "Training steps rolled back by recoveries and resumes.", kCounter,
                      lost_steps_));
    out.push_back(One("pscluster_workers_lost_total",
                      "Workers declared lost after failing health checks for worker_timeout_s.",
                      kCounter, workers_lost_));
    out.push_back(
        One("pscluster_checkpoints_total", "Checkpoints committed.", kCounter, checkpoints_));
    out.push_back(One("pscluster_checkpoint_duration_seconds",
                      "How long the last committed checkpoint took.", kGauge, checkpoint_seconds_));
    out.push_back(One("pscluster_checkpoint_bytes",
                      "Bytes of the last committed checkpoint, over all its files.", kGauge,
                      checkpoint_bytes_));
    MetricFamily healthy =
        Family("pscluster_cluster_tasks_healthy", "Cluster tasks answering health checks.", kGauge);
    Add(&healthy, ps_healthy_, {{"task_type", "ps"}});
    Add(&healthy, workers_healthy_, {{"task_type", "worker"}});
    out.push_back(std::move(healthy));
  }
  if (!source) return out;
  // Outside mu_: the source takes the job manager's and runners' locks.
  const std::vector<JobStatusProto> jobs = source();
  std::map<JobState, int> by_state;
  const JobStatusProto* running = nullptr;
  const JobStatusProto* trained = nullptr;  // the last job with training progress
  for (const JobStatusProto& j : jobs) {
    ++by_state[j.state()];
    if (j.state() == RUNNING) running = &j;
    if (j.steps() > 0 || j.epochs_size() > 0) trained = &j;
  }
  if (running != nullptr) trained = running;
  MetricFamily states = Family("pscluster_jobs", "Jobs known, by state.", MetricType::Gauge);
  for (const auto& [state, name] :
       std::vector<std::pair<JobState, std::string>>{{QUEUED, "queued"},
                                                     {RUNNING, "running"},
                                                     {SUCCEEDED, "succeeded"},
                                                     {FAILED, "failed"},
                                                     {CANCELLED, "cancelled"}}) {
    Add(&states, by_state[state], {{"state", name}});
  }
  out.push_back(std::move(states));
  out.push_back(
      One("pscluster_queue_depth", "Jobs waiting to run.", MetricType::Gauge, by_state[QUEUED]));
  out.push_back(One("pscluster_job_examples_per_second",
                    "Training examples per second of the running job (0 when none runs).",
                    MetricType::Gauge, running != nullptr ? running->examples_per_sec() : 0));
  out.push_back(One("pscluster_checkpoint_age_seconds",
                    "Seconds since the running job's last committed checkpoint (0 when none "
                    "runs or it takes no checkpoints).",
                    MetricType::Gauge,
                    running != nullptr && running_checkpoints
                        ? absl::ToDoubleSeconds(now_() - last_checkpoint)
                        : 0));
  if (trained != nullptr) {
    out.push_back(One("pscluster_job_train_loss",
                      "Mean training loss of the running (else the last) job's current epoch.",
                      MetricType::Gauge, trained->train_loss()));
    // eval: sidecar / none: the coordinator measured no eval metric (the
    // sidecar evaluator exports its own, pscluster_evaluator_eval).
    const bool inline_eval = trained->eval_mode().empty() || trained->eval_mode() == "inline";
    if (trained->epochs_size() > 0 && inline_eval) {
      MetricFamily eval = Family("pscluster_job_eval_metric",
                                 "Eval metrics of the running (else the last) job after its last "
                                 "finished epoch.",
                                 MetricType::Gauge);
      Add(&eval, trained->eval_accuracy(), {{"metric", "accuracy"}});
      Add(&eval, trained->eval_loss(), {{"metric", "loss"}});
      if (trained->eval_auc() > 0) Add(&eval, trained->eval_auc(), {{"metric", "auc"}});
      out.push_back(std::move(eval));
    }
  }
  return out;
}

}  // namespace pscluster
