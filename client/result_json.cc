#include "client/result_json.h"

#include "client/progress.h"

namespace pscluster {

nlohmann::json RunResultJson(const RunResult& result) {
  const JobStatusProto& s = result.status;
  nlohmann::json j;
  j["job"] = s.name();
  j["job_id"] = s.job_id();
  j["state"] = JobStateName(s.state());
  j["strategy"] = result.strategy;
  j["ps"] = result.ps;
  j["workers"] = result.workers;
  j["train_loss"] = s.train_loss();
  j["eval_accuracy"] = s.eval_accuracy();
  j["eval_loss"] = s.eval_loss();
  j["steps"] = s.steps();
  j["total_steps"] = s.total_steps();
  j["examples"] = s.examples();
  j["examples_per_sec"] = s.examples_per_sec();
  j["wall_seconds"] = s.wall_seconds();
  j["backend"] = s.backend();
  j["compute_seconds"] = s.compute_seconds();
  j["pull_seconds"] = s.pull_seconds();
  j["push_seconds"] = s.push_seconds();
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochResult& e : s.epochs()) {
    epochs.push_back({{"epoch", e.epoch()},
                      {"train_loss", e.train_loss()},
                      {"eval_accuracy", e.eval_accuracy()},
                      {"eval_loss", e.eval_loss()},
                      {"wall_seconds", e.wall_seconds()}});
  }
  j["epochs"] = std::move(epochs);
  if (result.pids) {
    j["pids"] = {{"ps", result.pids->ps},
                 {"worker", result.pids->worker},
                 {"coordinator", result.pids->coordinator}};
  }
  if (!s.error().empty()) j["error"] = s.error();
  return j;
}

}  // namespace pscluster
