#include "client/local_setup.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {

absl::StatusOr<std::unique_ptr<RunDir>> RunDir::Create(const std::string& requested, bool keep) {
  if (!requested.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(requested, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot create --run_dir ", requested, ": ", ec.message()));
    }
    return std::unique_ptr<RunDir>(new RunDir(requested, /*remove=*/false));
  }
  std::string tmpl = "/tmp/psctl-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<RunDir>(new RunDir(tmpl, /*remove=*/!keep));
}

RunDir::~RunDir() {
  std::error_code ec;
  if (remove_) std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<LocalClusterOptions> LocalClusterOptionsFor(const LocalRunOptions& options,
                                                           int num_ps, int replicas_per_worker) {
  LocalClusterOptions out;
  out.num_ps = num_ps;
  out.num_workers = options.num_workers;
  out.ps_server_bin = options.ps_server_bin;
  out.worker_server_bin = options.worker_server_bin;
  out.coordinator_bin = options.coordinator_bin;
  out.restart.enabled = options.restart;
  out.metrics = options.metrics;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int per_worker_threads =
      cores / std::max(1, options.num_workers * std::max(1, replicas_per_worker));
  out.worker_flags.push_back(absl::StrCat("--compute_threads=", std::max(1, per_worker_threads)));
  for (absl::Status s :
       {ResolveServerBinary(&out.ps_server_bin, "ps_server", "ps", "ps_server_bin"),
        ResolveServerBinary(&out.worker_server_bin, "worker_server", "worker",
                            "worker_server_bin"),
        ResolveServerBinary(&out.coordinator_bin, "coordinator", "coordinator",
                            "coordinator_bin")}) {
    if (!s.ok()) return s;
  }
  return out;
}

}  // namespace pscluster
