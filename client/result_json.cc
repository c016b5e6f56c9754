#include "client/result_json.h"

#include "client/progress.h"

namespace pscluster {

nlohmann::json JobStatusJson(const JobStatusProto& s) {
  nlohmann::json j;
  j["job"] = s.name();
  j["job_id"] = s.job_id();
  j["state"] = JobStateName(s.state());
  if (!s.strategy().empty()) j["strategy"] = s.strategy();
  j["queue_position"] = s.queue_position();
  j["already_complete"] = s.already_complete();
  j["workers_lost"] = s.workers_lost();
  j["checkpoint_failures"] = s.checkpoint_failures();
  j["checkpoint_error"] = s.checkpoint_error();
  j["checkpoints_disabled"] = s.checkpoints_disabled();
  j["invalid_input"] = s.invalid_input();
  j["steps_trained"] = s.steps_trained();
  j["ps_applied_steps"] = std::vector<int64_t>(s.ps_applied_steps().begin(), s.ps_applied_steps().end());
  j["submitted_unix_s"] = s.submitted_unix_s();
  j["epoch"] = s.epoch();
  j["total_epochs"] = s.total_epochs();
  j["train_loss"] = s.train_loss();
  // eval: sidecar / none: the coordinator measured no eval metric (null).
  const bool inline_eval = s.eval_mode().empty() || s.eval_mode() == "inline";
  j["eval_mode"] = s.eval_mode().empty() ? "inline" : s.eval_mode();
  j["eval_accuracy"] = inline_eval ? nlohmann::json(s.eval_accuracy()) : nlohmann::json();
  j["eval_loss"] = inline_eval ? nlohmann::json(s.eval_loss()) : nlohmann::json();
  j["eval_auc"] = inline_eval ? nlohmann::json(s.eval_auc()) : nlohmann::json();
  j["steps"] = s.steps();
  j["total_steps"] = s.total_steps();
  j["examples"] = s.examples();
  j["examples_per_sec"] = s.examples_per_sec();
  j["corrupt_records"] = s.corrupt_records();
  // docs/staleness.md
  j["max_closure_staleness"] = s.max_closure_staleness();
  j["max_push_staleness"] = s.max_push_staleness();
  // docs/elastic_ps.md
  j["num_ps"] = s.num_ps();
  j["ps_rescales"] = s.ps_rescales();
  j["last_rescale_pause_ms"] = s.last_rescale_pause_ms();
  j["wall_seconds"] = s.wall_seconds();
  j["backend"] = s.backend();
  j["compute_seconds"] = s.compute_seconds();
  j["pull_seconds"] = s.pull_seconds();
  j["push_seconds"] = s.push_seconds();
  j["checkpoints"] = s.checkpoints();
  j["resumed_from_checkpoint"] = s.resumed_from_checkpoint();
  j["ps_recoveries"] = s.ps_recoveries();
  j["lost_steps"] = s.lost_steps();
  j["last_recovery_seconds"] = s.last_recovery_seconds();
  j["per_replica_batch"] = s.per_replica_batch();
  j["global_batch"] = s.global_batch();
  j["replicas"] = s.replicas();
  j["learning_rate"] = s.learning_rate();
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochResult& e : s.epochs()) {
    nlohmann::json epoch = {{"epoch", e.epoch()},
                            {"train_loss", e.train_loss()},
                            {"wall_seconds", e.wall_seconds()}};
    if (inline_eval) {
      epoch["eval_accuracy"] = e.eval_accuracy();
      epoch["eval_loss"] = e.eval_loss();
      epoch["eval_auc"] = e.eval_auc();
    }
    epochs.push_back(std::move(epoch));
  }
  j["epochs"] = std::move(epochs);
  if (!s.error().empty()) j["error"] = s.error();
  return j;
}

nlohmann::json RunResultJson(const RunResult& result) {
  nlohmann::json j = JobStatusJson(result.status);
  j["strategy"] = result.strategy;
  j["ps"] = result.ps;
  j["workers"] = result.workers;
  if (result.pids) {
    j["pids"] = {{"ps", result.pids->ps},
                 {"worker", result.pids->worker},
                 {"coordinator", result.pids->coordinator}};
  }
  if (result.metrics) {
    j["metrics"] = {{"ps", result.metrics->ps},
                    {"worker", result.metrics->worker},
                    {"coordinator", result.metrics->coordinator}};
  }
  if (result.restarts) j["restarts"] = *result.restarts;
  if (result.describe) j["describe"] = DescribeJson(*result.describe);
  return j;
}

nlohmann::json JobListJson(const ListJobsResponse& list) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const JobStatusProto& job : list.jobs()) jobs.push_back(JobStatusJson(job));
  return {{"jobs", std::move(jobs)}};
}

nlohmann::json JobEventsJson(const std::string& job_id, const GetJobEventsResponse& events) {
  nlohmann::json list = nlohmann::json::array();
  for (const JobEvent& e : events.events()) {
    list.push_back(
        {{"unix_seconds", e.unix_seconds()}, {"kind", e.kind()}, {"message", e.message()}});
  }
  return {{"job_id", job_id}, {"events", std::move(list)}};
}

nlohmann::json SubmitJson(const SubmitJobResponse& response) {
  return {{"job_id", response.job_id()}, {"queue_position", response.queue_position()}};
}

nlohmann::json DescribeJson(const DescribeJobResponse& d) {
  nlohmann::json vars = nlohmann::json::array();
  for (const VariableLayout& v : d.variables()) {
    nlohmann::json shards = nlohmann::json::array();
    for (const ShardLayoutProto& s : v.shards()) {
      shards.push_back({{"name", s.name()},
                        {"ps", s.ps_index()},
                        {"row_offset", s.row_offset()},
                        {"rows", s.rows()},
                        {"parameter_bytes", s.parameter_bytes()},
                        {"slot_bytes", s.slot_bytes()},
                        {"evictions", s.evictions()}});
    }
    vars.push_back({{"name", v.name()},
                    {"kind", v.kind()},
                    {"shape", std::vector<int64_t>(v.shape().begin(), v.shape().end())},
                    {"partitioner", v.partitioner()},
                    {"shards", std::move(shards)}});
  }
  nlohmann::json ps = nlohmann::json::array();
  for (const PsLoad& p : d.ps()) {
    ps.push_back({{"ps", p.ps_index()},
                  {"address", p.address()},
                  {"variables", p.variables()},
                  {"parameter_bytes", p.parameter_bytes()},
                  {"slot_bytes", p.slot_bytes()},
                  {"applied_steps", p.applied_steps()},
                  {"duplicate_steps", p.duplicate_steps()},
                  {"held_keys", p.held_keys()}});
  }
  return {{"variables", std::move(vars)},
          {"ps", std::move(ps)},
          {"per_replica_batch", d.per_replica_batch()},
          {"global_batch", d.global_batch()},
          {"replicas", d.replicas()},
          {"learning_rate", d.learning_rate()}};
}

}  // namespace pscluster
