// Fuzz target for the cluster configuration parsers (common/cluster_config.h):
// ParseTfConfig (TF_CONFIG's JSON) and ParseClusterFile (a YAML or JSON
// cluster file), both run on every input.
//
// Any text must give a config or INVALID_ARGUMENT — never a crash, an
// exception or a sanitizer report. A cluster that parses must be valid as the
// header promises (at most one chief, at least one worker and one ps, every
// address host:port and none twice, and a listen address derived from each),
// must round-trip (written back as a cluster file, it parses to the same
// tasks), and a TF_CONFIG's task must exist in its cluster.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_config.h"
#include "fuzz/fuzz_check.h"
#include "yaml-cpp/yaml.h"

namespace pscluster {
namespace {

constexpr TaskType kTypes[] = {TaskType::kChief, TaskType::kWorker, TaskType::kPs,
                               TaskType::kEvaluator};

void CheckValid(const ClusterSpec& spec) {
  FUZZ_CHECK(spec.chief.size() <= 1, "more than one chief accepted");
  FUZZ_CHECK(!spec.worker.empty(), "a cluster without workers accepted");
  FUZZ_CHECK(spec.evaluator.size() <= 1, "more than one evaluator accepted");
  // No ps is a cluster too (multi_worker_mirrored jobs only).
  std::set<std::string> seen;
  for (TaskType type : kTypes) {
    for (const std::string& address : spec.tasks(type)) {
      FUZZ_CHECK(CheckHostPort(address).ok(), absl::StrCat("bad address accepted: ", address));
      FUZZ_CHECK(seen.insert(address).second, absl::StrCat("duplicate address: ", address));
      const std::string listen = ListenAddressFor(address);
      FUZZ_CHECK(CheckHostPort(listen).ok(),
                 absl::StrCat("listen address '", listen, "' of '", address, "' is not valid"));
    }
  }
}

// The cluster written as a cluster file, every address double-quoted.
std::string ToClusterFile(const ClusterSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  for (TaskType type : kTypes) {
    if (spec.tasks(type).empty()) continue;
    out << YAML::Key << TaskTypeName(type) << YAML::Value << YAML::BeginSeq;
    for (const std::string& address : spec.tasks(type)) out << YAML::DoubleQuoted << address;
    out << YAML::EndSeq;
  }
  out << YAML::EndMap << YAML::EndMap;
  return out.c_str();
}

void CheckRoundTrip(const ClusterSpec& spec) {
  const std::string text = ToClusterFile(spec);
  absl::StatusOr<ClusterSpec> again = ParseClusterFile(text, "roundtrip.yaml");
  FUZZ_CHECK(again.ok(), absl::StrCat(again.status().ToString(), " for\n", text));
  for (TaskType type : kTypes) {
    FUZZ_CHECK(again->tasks(type) == spec.tasks(type),
               absl::StrCat("round trip changed the ", TaskTypeName(type), " tasks:\n", text));
  }
}

void CheckError(const absl::Status& status, const char* source) {
  FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, status.ToString());
  FUZZ_CHECK(status.message().find(source) != absl::string_view::npos,
             absl::StrCat("error does not name its source: ", status.ToString()));
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;  // NOLINT(build/namespaces): a fuzz entry point
  const absl::string_view text(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<ClusterConfig> config = ParseTfConfig(text);
  if (config.ok()) {
    CheckValid(config->cluster);
    CheckRoundTrip(config->cluster);
    const std::vector<std::string>& tasks = config->cluster.tasks(config->task_type);
    if (config->task_type == TaskType::kEvaluator) {
      // TF's evaluator: index 0, listed in `cluster` or not.
      FUZZ_CHECK(config->task_index == 0, "an evaluator index other than 0 accepted");
      FUZZ_CHECK(config->task_address().empty() || CheckHostPort(config->task_address()).ok(),
                 "the evaluator's address is invalid");
    } else {
      FUZZ_CHECK(config->task_index >= 0 && static_cast<size_t>(config->task_index) < tasks.size(),
                 absl::StrCat("task index ", config->task_index, " out of range"));
      FUZZ_CHECK(CheckHostPort(config->task_address()).ok(), "the task's address is invalid");
    }
    FUZZ_CHECK(
        MakeClusterConfig(config->cluster, config->task_type, config->task_index, "fuzz").ok(),
        "MakeClusterConfig refuses a parsed TF_CONFIG's task");
  } else {
    CheckError(config.status(), "TF_CONFIG");
  }

  absl::StatusOr<ClusterSpec> spec = ParseClusterFile(text, "cluster.yaml");
  if (spec.ok()) {
    CheckValid(*spec);
    CheckRoundTrip(*spec);
  } else {
    CheckError(spec.status(), "cluster.yaml");
  }
  return 0;
}
