// The cluster a long-lived pscluster server belongs to, and its own task in
// it, in TensorFlow's terms: a cluster spec (job name -> list of "host:port")
// plus a task (type and index). It comes from the TF_CONFIG environment
// variable (JSON, TF's format) or from a cluster file (YAML or JSON, the same
// `cluster:` mapping) given with --cluster/--task_type/--task_index.
//
//   {"cluster": {"chief": ["coord:2222"], "worker": ["w0:2222", "w1:2222"],
//                "ps": ["ps0:2222"]},
//    "task": {"type": "ps", "index": 0}}
//
// The coordinator is the `chief` task. The sidecar evaluator (evaluator/) is
// task type `evaluator`, index 0: as in TF it need not appear in `cluster`
// (it serves no RPC; an `evaluator` list there, of at most one address, is
// accepted and kept). Parsing only: no gRPC, no environment
// reads (callers pass TF_CONFIG's text in). Every function is thread-safe.
#ifndef PSCLUSTER_COMMON_CLUSTER_CONFIG_H_
#define PSCLUSTER_COMMON_CLUSTER_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pscluster {

enum class TaskType { kChief, kWorker, kPs, kEvaluator };

// "chief", "worker", "ps" or "evaluator".
const char *TaskTypeName(TaskType type);

// INVALID_ARGUMENT naming `name` unless it is chief, worker, ps or evaluator.
absl::StatusOr<TaskType> ParseTaskType(absl::string_view name);

// Mutual-TLS files shared by every process of a cluster (an optional `tls:`
// mapping next to `cluster:` in a cluster file or TF_CONFIG, a pscluster
// extension): this task's certificate chain and private key (PEM), the CA that
// signs every cluster certificate, and optionally the name every peer's
// certificate is checked against instead of the host it is dialled at (e.g.
// one cluster certificate with DNS name "pscluster" for all pods). All empty:
// plaintext. Paths are read by the process that uses them.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
  std::string server_name;

  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

// Addresses of every task, index i of a list = task i of that type. A valid
// spec has at most one chief, at least one worker (a ps for every strategy
// but multi_worker_mirrored), at most one evaluator, every address host:port
// with port 1-65535, and no address twice.
struct ClusterSpec {
  std::vector<std::string> chief;
  std::vector<std::string> worker;
  std::vector<std::string> ps;
  // TF lists the evaluator in `cluster` optionally; nothing dials it.
  std::vector<std::string> evaluator;
  // From the optional `tls:` mapping (keys cert, key, ca, server_name; cert,
  // key and ca all or none).
  TlsFiles tls;

  const std::vector<std::string> &tasks(TaskType type) const;
};

// A cluster plus the task this process runs.
struct ClusterConfig {
  ClusterSpec cluster;
  TaskType task_type = TaskType::kChief;
  int task_index = 0;

  // This task's "host:port" in `cluster`; empty for an evaluator that the
  // cluster does not list.
  const std::string &task_address() const;
};

// Parses TF_CONFIG's JSON text. `source` names it in errors ("TF_CONFIG").
// INVALID_ARGUMENT names the problem: malformed JSON (with line:column), a
// missing or malformed `cluster` or `task`, an unknown job or task type, an
// index out of range, a bad or duplicate address, no worker (no ps is a
// cluster for multi_worker_mirrored jobs only), or a
// chief task when the cluster has no chief.
absl::StatusOr<ClusterConfig> ParseTfConfig(absl::string_view text,
                                            absl::string_view source = "TF_CONFIG");

// Parses a cluster file's text (YAML or JSON): a mapping with a `cluster:`
// key (a `task:` key, if present, is ignored: the task comes from flags).
// INVALID_ARGUMENT as for ParseTfConfig, with `source` (the file name) and
// line:column.
absl::StatusOr<ClusterSpec> ParseClusterFile(absl::string_view text, absl::string_view source);

// Reads and parses the cluster file at `path`; NOT_FOUND if it cannot be read.
absl::StatusOr<ClusterSpec> LoadClusterFile(const std::string &path);

// `cluster` plus the task (`type`, `index`). INVALID_ARGUMENT when the
// cluster has no such task (e.g. "task ps 2 is out of range: the cluster has
// 2 ps tasks"); evaluator 0 is always valid (listed in `cluster` or not),
// any other evaluator index is not.
absl::StatusOr<ClusterConfig> MakeClusterConfig(ClusterSpec cluster, TaskType type, int index,
                                                absl::string_view source);

// OK when `address` is host:port ("[v6]:port" for IPv6) with a port in
// [min_port, 65535]; otherwise INVALID_ARGUMENT saying what is wrong.
absl::Status CheckHostPort(absl::string_view address, int min_port = 1);

// The address a server whose cluster entry is `address` (valid host:port)
// listens on: `address` itself when its host is an IP literal, else
// "0.0.0.0:port" (a DNS name such as a Kubernetes pod's: listen on every
// interface, since the name may not resolve to this host's IP locally).
std::string ListenAddressFor(absl::string_view address);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_CLUSTER_CONFIG_H_
