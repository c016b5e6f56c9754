// The machine-readable result of a psctl run: one JSON object (nlohmann::json)
// printed on stdout by `psctl local --output json`, built from the job's final
// JobStatusProto plus what psctl knows about the run (strategy, cluster size,
// child pids).
//
// Pure functions; thread-safe.
#ifndef PSCLUSTER_CLIENT_RESULT_JSON_H_
#define PSCLUSTER_CLIENT_RESULT_JSON_H_

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protos/coordinator.pb.h"

namespace pscluster {

// Process ids of a local cluster's children (all stopped by the time the
// result is printed; tests use them to check nothing was left behind).
struct ClusterPids {
  std::vector<pid_t> ps;
  std::vector<pid_t> worker;
  pid_t coordinator = 0;
};

struct RunResult {
  // The job's last status. When psctl never got one (the cluster failed to
  // start, the coordinator vanished) the caller fills state and error itself.
  JobStatusProto status;
  std::string strategy = "parameter_server";
  int ps = 0;
  int workers = 0;
  std::optional<ClusterPids> pids;  // absent when no cluster was started
  // Restarts of each child by name, zeros included ("ps-0", "worker-1",
  // "coordinator"); absent when no cluster was started.
  std::optional<std::map<std::string, int>> restarts;
  // The variable layout (`psctl local --describe`), taken before the stop.
  std::optional<DescribeJobResponse> describe;
};

// {"job", "job_id", "state", "strategy", "ps", "workers", "train_loss",
//  "eval_accuracy", "eval_loss", "steps", "total_steps", "examples",
//  "examples_per_sec", "wall_seconds", "backend", "compute_seconds",
//  "pull_seconds", "push_seconds", "checkpoints", "resumed_from_checkpoint",
//  "ps_recoveries", "lost_steps", "last_recovery_seconds", "epochs": [{"epoch", "train_loss",
//  "eval_accuracy", "eval_loss", "wall_seconds"}], "pids": {"ps": [..],
//  "worker": [..], "coordinator": pid} (the latest processes after restarts),
//  "restarts": {"ps-0": 0, "worker-1": 2, ..., "coordinator": 0} (every
//  child, zeros included), "error" (only when non-empty)}
// With a describe: "describe": {"variables": [{"name", "kind", "shape",
// "partitioner", "shards": [{"name", "ps", "row_offset", "rows",
// "parameter_bytes", "slot_bytes", "evictions"}]}], "ps": [{"ps", "address",
// "variables", "parameter_bytes", "slot_bytes"}]}. Binary models add
// "eval_auc" (also per epoch).
nlohmann::json RunResultJson(const RunResult& result);

nlohmann::json DescribeJson(const DescribeJobResponse& describe);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_RESULT_JSON_H_
