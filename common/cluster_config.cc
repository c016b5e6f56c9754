#include "common/cluster_config.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

constexpr TaskType kAllTypes[] = {TaskType::kChief, TaskType::kWorker, TaskType::kPs,
                                  TaskType::kEvaluator};

// "SOURCE:LINE:COL" (or SOURCE when the node has no position).
std::string Where(absl::string_view source, const YAML::Mark &mark) {
  if (mark.is_null()) return std::string(source);
  return absl::StrCat(source, ":", mark.line + 1, ":", mark.column + 1);
}

absl::Status Error(absl::string_view source, const YAML::Node &node, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(Where(source, node.Mark()), ": ", message));
}

// Splits "host:port" / "[v6]:port" into host (without brackets) and port text.
bool SplitHostPort(absl::string_view address, absl::string_view *host, absl::string_view *port) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return false;
    }
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
    return true;
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  // An unbracketed IPv6 literal ("::1:2222") is ambiguous.
  return host->find(':') == absl::string_view::npos;
}

bool IsIpLiteral(absl::string_view host) {
  const std::string h(host);
  unsigned char buf[16];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

std::vector<std::string> &MutableTasks(ClusterSpec *spec, TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return spec->chief;
    case TaskType::kWorker:
      return spec->worker;
    case TaskType::kEvaluator:
      return spec->evaluator;
    case TaskType::kPs:
      break;
  }
  return spec->ps;
}

// Parses the `cluster` mapping at `node`.
absl::StatusOr<ClusterSpec> ParseClusterNode(const YAML::Node &node, absl::string_view source) {
  if (!node.IsMap()) {
    return Error(source, node,
                 "`cluster` must be a mapping of job name (chief, worker, ps, evaluator) "
                 "to a list of host:port");
  }
  ClusterSpec spec;
  // address -> "ps 0", for duplicate detection.
  std::map<std::string, std::string> seen;
  for (const auto &entry : node) {
    const std::string job = entry.first.as<std::string>();
    absl::StatusOr<TaskType> type = ParseTaskType(job);
    if (!type.ok()) {
      return Error(source, entry.first,
                   absl::StrCat("unknown job '", job,
                                "' in `cluster` (chief, worker, ps or evaluator)"));
    }
    const YAML::Node &list = entry.second;
    if (!list.IsSequence()) {
      return Error(source, list, absl::StrCat("`cluster.", job, "` must be a list of host:port"));
    }
    std::vector<std::string> &out = MutableTasks(&spec, *type);
    if (!out.empty()) {
      return Error(source, entry.first, absl::StrCat("job '", job, "' appears twice"));
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node &item = list[i];
      const std::string task = absl::StrCat(job, " ", i);
      if (!item.IsScalar()) {
        return Error(source, item, absl::StrCat(task, ": must be a host:port string"));
      }
      const std::string address = item.as<std::string>();
      if (absl::Status s = CheckHostPort(address); !s.ok()) {
        return Error(source, item, absl::StrCat(task, ": ", s.message()));
      }
      auto [it, inserted] = seen.emplace(address, task);
      if (!inserted) {
        return Error(
            source, item,
            absl::StrCat(task, ": duplicate address '", address, "' (also ", it->second, ")"));
      }
      out.push_back(address);
    }
  }
  if (spec.chief.size() > 1) {
    return Error(source, node,
                 absl::StrCat("`cluster.chief` has ", spec.chief.size(),
                              " tasks; there is exactly one chief (the coordinator)"));
  }
  if (spec.evaluator.size() > 1) {
    return Error(source, node,
                 absl::StrCat("`cluster.evaluator` has ", spec.evaluator.size(),
                              " tasks; there is at most one evaluator (as in TF)"));
  }
  // No ps: a cluster for multi_worker_mirrored jobs only (TF's TF_CONFIG
  // for MultiWorkerMirroredStrategy has none either).
  if (spec.worker.empty()) {
    return Error(source, node, "`cluster` has no worker task (needs at least one)");
  }
  return spec;
}

// Parses the optional `tls` mapping of `root` into spec->tls.
absl::Status ParseTlsNode(const YAML::Node &root, absl::string_view source, ClusterSpec *spec) {
  const YAML::Node node = root["tls"];
  if (!node) return absl::OkStatus();
  if (!node.IsMap()) {
    return Error(source, node, "`tls` must be a mapping with cert, key, ca (and server_name)");
  }
  for (const auto &entry : node) {
    const std::string key = entry.first.as<std::string>();
    std::string *field = key == "cert"          ? &spec->tls.cert
                         : key == "key"         ? &spec->tls.key
                         : key == "ca"          ? &spec->tls.ca
                         : key == "server_name" ? &spec->tls.server_name
                                                : nullptr;
    if (field == nullptr) {
      return Error(source, entry.first,
                   absl::StrCat("unknown key `tls.", key, "` (cert, key, ca, server_name)"));
    }
    if (!entry.second.IsScalar() || entry.second.as<std::string>().empty()) {
      return Error(source, entry.second, absl::StrCat("`tls.", key, "` must be a non-empty path"));
    }
    *field = entry.second.as<std::string>();
  }
  if (spec->tls.cert.empty() || spec->tls.key.empty() || spec->tls.ca.empty()) {
    return Error(source, node, "`tls` needs all of cert, key and ca");
  }
  return absl::OkStatus();
}

// Parses `text` into a mapping with a `cluster` key; returns the document.
absl::StatusOr<YAML::Node> LoadMapping(absl::string_view text, absl::string_view source,
                                       absl::string_view what) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception &e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(source, e.mark), ": malformed ", what, ": ", e.msg));
  }
  if (!root.IsDefined() || root.IsNull()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": empty"));
  }
  if (!root.IsMap()) {
    return Error(source, root, absl::StrCat("must be a ", what, " object with a `cluster` key"));
  }
  if (!root["cluster"]) {
    return Error(source, root, "missing `cluster` (job name -> list of host:port)");
  }
  return root;
}

}  // namespace

const char *TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return "chief";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kPs:
      return "ps";
    case TaskType::kEvaluator:
      return "evaluator";
  }
  return "?";
}

absl::StatusOr<TaskType> ParseTaskType(absl::string_view name) {
  for (TaskType t : kAllTypes) {
    if (name == TaskTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown task type '", name, "' (chief, worker, ps or evaluator)"));
}

const std::vector<std::string> &ClusterSpec::tasks(TaskType type) const {
  switch (type) {
    case TaskType::kChief:
      return chief;
    case TaskType::kWorker:
      return worker;
    case TaskType::kEvaluator:
      return evaluator;
    case TaskType::kPs:
      break;
  }
  return ps;
}

const std::string &ClusterConfig::task_address() const {
  static const std::string *const kNone = new std::string();
  const std::vector<std::string> &tasks = cluster.tasks(task_type);
  if (task_index < 0 || static_cast<size_t>(task_index) >= tasks.size()) return *kNone;
  return tasks[task_index];
}

absl::Status CheckHostPort(absl::string_view address, int min_port) {
  absl::string_view host, port_text;
  int port = -1;
  if (!SplitHostPort(address, &host, &port_text) || host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not host:port (e.g. 10.0.0.3:2222 or ps-0.ps:2222)"));
  }
  if (!absl::SimpleAtoi(port_text, &port) || port < min_port || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "': port '", port_text,
                                                   "' is out of range (", min_port, "-65535)"));
  }
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != ':' && c != '%') {
      return absl::InvalidArgumentError(
          absl::StrCat("'", address, "': host '", host, "' is not a DNS name or IP address"));
    }
  }
  return absl::OkStatus();
}

std::string ListenAddressFor(absl::string_view address) {
  absl::string_view host, port;
  if (!SplitHostPort(address, &host, &port)) return std::string(address);
  if (IsIpLiteral(host)) return std::string(address);
  return absl::StrCat("0.0.0.0:", port);
}

absl::StatusOr<ClusterConfig> MakeClusterConfig(ClusterSpec cluster, TaskType type, int index,
                                                absl::string_view source) {
  const size_t n = cluster.tasks(type).size();
  if (type == TaskType::kEvaluator) {
    // TF's evaluator is usually not in `cluster`: it is task evaluator 0.
    if (index != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": task evaluator ", index, " is out of range: there is one evaluator, index 0"));
    }
  } else if (index < 0 || static_cast<size_t>(index) >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": task ", TaskTypeName(type), " ", index, " is out of range: the cluster has ", n,
        " ", TaskTypeName(type), " task", n == 1 ? "" : "s"));
  }
  ClusterConfig config;
  config.cluster = std::move(cluster);
  config.task_type = type;
  config.task_index = index;
  return config;
}

absl::StatusOr<ClusterConfig> ParseTfConfig(absl::string_view text, absl::string_view source) {
  absl::StatusOr<YAML::Node> root = LoadMapping(text, source, "JSON");
  if (!root.ok()) return root.status();
  try {
    absl::StatusOr<ClusterSpec> cluster = ParseClusterNode((*root)["cluster"], source);
    if (!cluster.ok()) return cluster.status();
    if (absl::Status s = ParseTlsNode(*root, source, &*cluster); !s.ok()) return s;
    const YAML::Node task = (*root)["task"];
    if (!task) return Error(source, *root, "missing `task` ({\"type\": ..., \"index\": ...})");
    if (!task.IsMap()) {
      return Error(source, task, "`task` must be an object {\"type\": ..., \"index\": ...}");
    }
    if (!task["type"]) {
      return Error(source, task, "missing `task.type` (chief, worker, ps or evaluator)");
    }
    absl::StatusOr<TaskType> type = ParseTaskType(task["type"].as<std::string>());
    if (!type.ok()) return Error(source, task["type"], type.status().message());
    int index = 0;  // TF's default when `index` is absent.
    if (task["index"]) {
      if (!YAML::convert<int>::decode(task["index"], index)) {
        return Error(source, task["index"], "`task.index` must be an integer");
      }
    }
    return MakeClusterConfig(*std::move(cluster), *type, index, source);
  } catch (const YAML::Exception &e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(source, e.mark), ": ", e.msg));
  }
}

absl::StatusOr<ClusterSpec> ParseClusterFile(absl::string_view text, absl::string_view source) {
  absl::StatusOr<YAML::Node> root = LoadMapping(text, source, "YAML");
  if (!root.ok()) return root.status();
  try {
    absl::StatusOr<ClusterSpec> cluster = ParseClusterNode((*root)["cluster"], source);
    if (!cluster.ok()) return cluster.status();
    if (absl::Status s = ParseTlsNode(*root, source, &*cluster); !s.ok()) return s;
    return cluster;
  } catch (const YAML::Exception &e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(source, e.mark), ": ", e.msg));
  }
}

absl::StatusOr<ClusterSpec> LoadClusterFile(const std::string &path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read cluster file ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseClusterFile(text.str(), path);
}

}  // namespace pscluster
