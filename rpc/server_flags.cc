#include "rpc/server_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/cluster_config.h"

ABSL_FLAG(std::string, address, "",
          "host:port to serve gRPC on; port 0 lets the kernel pick one. Default: this task's "
          "entry in the cluster (--cluster or TF_CONFIG), else 127.0.0.1:0.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written here once the server is ready.");
ABSL_FLAG(std::string, metrics_address, "",
          "host:port for Prometheus /metrics; empty turns metrics serving off.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this process, signed by --tls_ca. With --tls_key and "
          "--tls_ca every server and channel of the process uses mutual TLS. Default: the "
          "cluster file's or TF_CONFIG's `tls.cert`, else plaintext.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate of the cluster CA: peers must present a certificate it signed.");
ABSL_FLAG(std::string, tls_server_name, "",
          "check peers' certificates against this name instead of the host dialled (one "
          "cluster certificate for every task, e.g. DNS:pscluster).");
ABSL_FLAG(int64_t, max_message_bytes, pscluster::kDefaultMaxMessageBytes,
          "largest gRPC message this process sends or accepts (larger: RESOURCE_EXHAUSTED). "
          "Every process of a cluster should use the same value.");
ABSL_FLAG(std::string, cluster, "",
          "cluster file (YAML or JSON: a `cluster:` mapping of chief/worker/ps to lists of "
          "host:port, as in TF_CONFIG); with --task_type/--task_index. Wins over TF_CONFIG.");
ABSL_FLAG(std::string, task_type, "",
          "this server's job in the cluster (chief, worker, ps or evaluator); default: the one "
          "this binary runs (coordinator: chief).");
ABSL_FLAG(int, task_index, -1,
          "this server's index in its job's list in the cluster (--cluster or TF_CONFIG).");

namespace pscluster {
namespace {

// absl::ParseCommandLine exits with 1 on an unknown flag or a missing value;
// check those first so every flag error is reported the same way.
absl::Status CheckFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const absl::string_view name = arg.substr(0, arg.find('='));
    if (name == "help" || name == "helpfull" || name == "version") continue;
    if (const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name)) {
      if (!flag->IsOfType<bool>() && !absl::StrContains(arg, '=') && i + 1 == argc) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      continue;
    }
    if (absl::StartsWith(name, "no") && absl::FindCommandLineFlag(name.substr(2)) != nullptr) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
  }
  return absl::OkStatus();
}

// Checks that `address` is "host:port" with port in [0, 65535].
absl::Status CheckAddress(const std::string& flag, const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "='", address, "' is not host:port (e.g. 127.0.0.1:0)"));
  }
  return absl::OkStatus();
}

absl::Status CheckLogLevel(const std::string& level) {
  for (const char* name : {"trace", "debug", "info", "warn", "error", "off"}) {
    if (level == name) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level='", level, "' is not one of trace, debug, info, warn, error, off"));
}

}  // namespace

absl::StatusOr<ServerOptions> ParseServerCommandLine(int argc, char** argv) {
  if (absl::Status s = CheckFlagNames(argc, argv); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(s.message(), " (see --help)"));
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", positional[1], "' (only flags are accepted)"));
  }
  ServerOptions options;
  if (!absl::GetFlag(FLAGS_address).empty()) options.address = absl::GetFlag(FLAGS_address);
  options.port_file = absl::GetFlag(FLAGS_port_file);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.log_level = absl::GetFlag(FLAGS_log_level);
  options.transport.tls.cert = absl::GetFlag(FLAGS_tls_cert);
  options.transport.tls.key = absl::GetFlag(FLAGS_tls_key);
  options.transport.tls.ca = absl::GetFlag(FLAGS_tls_ca);
  options.transport.tls.server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.transport.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (options.transport.max_message_bytes < kMinMaxMessageBytes ||
      options.transport.max_message_bytes > kMaxMaxMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_message_bytes=", options.transport.max_message_bytes, " is outside [",
        kMinMaxMessageBytes, ", ", kMaxMaxMessageBytes, "]"));
  }
  if (absl::Status s = CheckAddress("address", options.address); !s.ok()) return s;
  if (absl::Status s = CheckLogLevel(options.log_level); !s.ok()) return s;
  if (!options.metrics_address.empty()) {
    if (absl::Status s = CheckAddress("metrics_address", options.metrics_address); !s.ok()) {
      return s;
    }
  }
  return options;
}

absl::StatusOr<std::optional<ClusterConfig>> ResolveServerCluster(TaskType self,
                                                                  const char* tf_config,
                                                                  ServerOptions* options) {
  const std::string cluster_file = absl::GetFlag(FLAGS_cluster);
  const std::string task_type_flag = absl::GetFlag(FLAGS_task_type);
  const int task_index_flag = absl::GetFlag(FLAGS_task_index);
  const bool have_tf_config = tf_config != nullptr && tf_config[0] != '\0';
  if (cluster_file.empty() && !have_tf_config) {
    if (!task_type_flag.empty() || task_index_flag != -1) {
      return absl::InvalidArgumentError(
          "--task_type/--task_index need a cluster: --cluster FILE or the TF_CONFIG variable");
    }
    return std::optional<ClusterConfig>();
  }
  if (task_index_flag < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task_index=", task_index_flag, " must be >= 0"));
  }
  std::optional<TaskType> type_flag;
  if (!task_type_flag.empty()) {
    absl::StatusOr<TaskType> t = ParseTaskType(task_type_flag);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--task_type: ", t.status().message()));
    type_flag = *t;
  }

  absl::StatusOr<ClusterConfig> config;
  std::string source;
  if (!cluster_file.empty()) {
    source = cluster_file;
    absl::StatusOr<ClusterSpec> spec = LoadClusterFile(cluster_file);
    if (!spec.ok()) return spec.status();
    const TaskType type = type_flag.value_or(self);
    int index = task_index_flag;
    if (index == -1 && type == TaskType::kEvaluator) index = 0;  // the only one
    if (index == -1) {
      if (spec->tasks(type).size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--cluster needs --task_index: ", cluster_file, " has ",
                         spec->tasks(type).size(), " ", TaskTypeName(type), " tasks"));
      }
      index = 0;
    }
    config = MakeClusterConfig(*std::move(spec), type, index, cluster_file);
  } else {
    source = "TF_CONFIG";
    config = ParseTfConfig(tf_config, "TF_CONFIG");
    if (config.ok() && (type_flag.has_value() || task_index_flag != -1)) {
      config = MakeClusterConfig(std::move(config->cluster), type_flag.value_or(config->task_type),
                                 task_index_flag == -1 ? config->task_index : task_index_flag,
                                 "TF_CONFIG with --task_type/--task_index");
    }
  }
  if (!config.ok()) return config.status();
  if (config->task_type != self) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": this task is ", TaskTypeName(config->task_type), " ", config->task_index,
        ", but this server runs ", TaskTypeName(self), " tasks"));
  }
  if (absl::GetFlag(FLAGS_address).empty() && !config->task_address().empty()) {
    options->address = ListenAddressFor(config->task_address());
  }
  // The cluster's TLS files unless the flags name some.
  if (options->transport.tls.empty()) {
    const std::string server_name = options->transport.tls.server_name;
    options->transport.tls = config->cluster.tls;
    if (!server_name.empty()) options->transport.tls.server_name = server_name;
  }
  return std::optional<ClusterConfig>(*std::move(config));
}

}  // namespace pscluster
