// The machine-readable output of psctl: JSON objects (nlohmann::json) printed
// on stdout by `-o json` (and, converted, by `-o yaml`; see output_format.h).
// A job's status has ONE schema, JobStatusJson, shared by `psctl local` (which
// adds what it knows about the run: strategy, cluster size, child pids) and
// `psctl status|watch|list`. Numbers are JSON numbers, never strings (unlike
// protobuf's JSON printer, which quotes int64).
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

// "127.0.0.1:PORT" of each child's Prometheus metrics (psctl local --metrics).
struct ClusterMetricsAddresses {
  std::vector<std::string> ps;
  std::vector<std::string> worker;
  std::string coordinator;
};

struct RunResult {
  // The job's last status. When psctl never got one (the cluster failed to
  // start, the coordinator vanished) the caller fills state and error itself.
  JobStatusProto status;
  std::string strategy = "parameter_server";
  int ps = 0;
  int workers = 0;
  std::optional<ClusterPids> pids;  // absent when no cluster was started
  // Absent unless the children serve metrics (psctl local --metrics).
  std::optional<ClusterMetricsAddresses> metrics;
  // Restarts of each child by name, zeros included ("ps-0", "worker-1",
  // "coordinator"); absent when no cluster was started.
  std::optional<std::map<std::string, int>> restarts;
  // The variable layout (`psctl local --describe`), taken before the stop.
  std::optional<DescribeJobResponse> describe;
};

// A job's status: {"job", "job_id", "state", "queue_position",
//  "already_complete" (the checkpoint already covered every epoch: nothing was
//  trained in this run), "submitted_unix_s", "epoch", "total_epochs",
//  "train_loss", "eval_mode" ("inline", "sidecar" or "none"), "eval_accuracy",
//  "eval_loss", "eval_auc" (null, and absent per epoch, unless eval_mode is
//  inline: the coordinator measured none), "steps", "total_steps", "examples", "examples_per_sec", "wall_seconds", "backend",
//  "compute_seconds", "pull_seconds", "push_seconds", "checkpoints",
//  "resumed_from_checkpoint", "ps_recoveries", "lost_steps",
//  "last_recovery_seconds", "per_replica_batch", "global_batch" (=
//  per_replica_batch x "replicas"), "learning_rate" (a constant, or the
//  schedule in words), "epochs": [...] (as below), "error" (only when
//  non-empty)}.
nlohmann::json JobStatusJson(const JobStatusProto& status);

// JobStatusJson(result.status) plus "strategy", "ps", "workers", and:
// {"job", "job_id", "state", "strategy", "ps", "workers", "train_loss",
//  "eval_accuracy", "eval_loss", "steps", "total_steps", "examples",
//  "examples_per_sec", "wall_seconds", "backend", "compute_seconds",
//  "pull_seconds", "push_seconds", "checkpoints", "resumed_from_checkpoint",
//  "ps_recoveries", "lost_steps", "last_recovery_seconds", "epochs": [{"epoch", "train_loss",
//  "eval_accuracy", "eval_loss", "wall_seconds"}], "pids": {"ps": [..],
//  "worker": [..], "coordinator": pid} (the latest processes after restarts),
//  "restarts": {"ps-0": 0, "worker-1": 2, ..., "coordinator": 0} (every
//  child, zeros included), "metrics": {"ps": ["127.0.0.1:P", ..], "worker":
//  [..], "coordinator": "127.0.0.1:P"} (only with --metrics), "error" (only
//  when non-empty)}
// With a describe: "describe": {"variables": [{"name", "kind", "shape",
// "partitioner", "shards": [{"name", "ps", "row_offset", "rows",
// "parameter_bytes", "slot_bytes", "evictions"}]}], "ps": [{"ps", "address",
// "variables", "parameter_bytes", "slot_bytes"}], "per_replica_batch",
// "global_batch", "replicas", "learning_rate"}. Binary models add
// "eval_auc" (also per epoch).
nlohmann::json RunResultJson(const RunResult& result);

nlohmann::json DescribeJson(const DescribeJobResponse& describe);

// {"jobs": [JobStatusJson, ...]}.
nlohmann::json JobListJson(const ListJobsResponse& list);

// {"job_id", "events": [{"unix_seconds", "kind", "message"}]}.
nlohmann::json JobEventsJson(const std::string& job_id, const GetJobEventsResponse& events);

// {"job_id", "queue_position"}.
nlohmann::json SubmitJson(const SubmitJobResponse& response);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_RESULT_JSON_H_
