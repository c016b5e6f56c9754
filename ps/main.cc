// ps_server: one parameter-server task. Serves the ParameterServer gRPC
// service (plus gRPC health checking) and, optionally, Prometheus /metrics,
// until SIGINT or SIGTERM. Flag parsing and wiring only; logic is in ps/core.
//
// Exit codes: 0 after a clean shutdown, 1 if the server cannot start,
// 2 for invalid flags.
#include <malloc.h>
#include <prometheus/registry.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/notification.h"
#include "common/cluster_config.h"
#include "common/confined_path.h"
#include "ps/core/job_stores.h"
#include "ps/core/job_stores_metrics.h"
#include "ps/core/memory_budget.h"
#include "ps/service/data_plane_server.h"
#include "ps/service/ps_service.h"
#include "rpc/frame_socket.h"
#include "common/termination_signals.h"
#include "rpc/rpc_util.h"
#include "rpc/server_flags.h"
#include "rpc/tls_stream.h"
#include "rpc/transport.h"

ABSL_FLAG(int64_t, max_memory_bytes, int64_t{8} << 30,
          "Most bytes of parameters plus optimizer slots (hash-table rows included) this PS "
          "holds over all jobs, plus the data plane's request buffers; CreateVariables, Restore, "
          "requests that would create rows and data-plane frames past it are refused with "
          "RESOURCE_EXHAUSTED. 0: unlimited. Default 8 GiB, the coordinator's "
          "--ps_memory_limit_bytes.");

ABSL_FLAG(std::string, checkpoint_root, "",
          "Directory under which this PS reads and writes checkpoint files: Save and Restore "
          "name files relative to it (e.g. job-a/ckpt-3/ps-0.data), and a name whose real path "
          "leaves it (\"..\", a symlink pointing out) is refused. Empty (default): Save and "
          "Restore are refused with FAILED_PRECONDITION. Mount the coordinator's "
          "--checkpoint_root storage here.");

ABSL_FLAG(int64_t, checkpoint_quota_bytes, 0,
          "Per job: Save is refused (RESOURCE_EXHAUSTED) once the job's checkpoint directory "
          "holds this many bytes. 0 (default): no quota. Each job's Saves are confined to the "
          "directory its coordinator named, and never replace a file.");

ABSL_FLAG(bool, allow_keyless_jobs, false,
          "Take jobs created without a job key (tools and benchmarks that run without a "
          "coordinator). Off (default): every job must come from a coordinator, whose key "
          "then guards its control RPCs; on, keyless jobs are still refused once any job "
          "gave a key.");

ABSL_FLAG(int, data_plane_port, 0,
          "TCP port of this PS's raw data plane: Push and Pull as frames on TCP, without "
          "gRPC's framing and copies (ps/service/data_plane_server.h), on the host of "
          "--address. 0 (default): a free port, which workers learn over gRPC; -1: none "
          "(workers use gRPC). With TLS (--tls_cert/--tls_key/--tls_ca) it speaks mutual "
          "TLS 1.3 with the same files, and takes only worker/coordinator certificates.");

ABSL_FLAG(int64_t, data_plane_max_pending_bytes, 0,
          "Most bytes the data plane may have allocated, over all connections, for frames "
          "still arriving (buffers grow as bytes arrive, never to the size a header claims; "
          "they count against --max_memory_bytes too). A frame that would pass it is refused "
          "with RESOURCE_EXHAUSTED and its connection closed. 0 (default): half of "
          "--max_memory_bytes, at most 1 GiB (1 GiB when that is unlimited).");

ABSL_FLAG(int, data_plane_threads, 0,
          "Threads that serve the data plane's proven connections when they are readable "
          "(idle connections hold none; ps/service/data_plane_server.h). 0 (default): "
          "max(4, 2 x the cores).");

namespace pscluster {
namespace {

// Raises the soft limit on open files to the hard one: every data-plane
// connection is a descriptor, and a common soft limit of 1,024 would cap the
// connections at 896 (DataPlaneServer keeps 128 for the rest).
void RaiseOpenFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    spdlog::info("open files: soft limit raised from {} to {}", before, limit.rlim_cur);
  }
}

int Main(int argc, char** argv) {
  // Tensors of 1 MiB and more are allocated with mmap and given back to the
  // kernel when freed: otherwise glibc keeps every large request buffer it has
  // seen, and a PS holding N bytes of parameters with Adam slots sits well
  // above 3 N resident (bench/memory_bench).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // Setting the mmap threshold also pins glibc's trim threshold at its 128 KiB
  // default: every request freed at the top of the heap would be handed back
  // and faulted in again on the next one (Fashion-MNIST 2x2, 3 epochs: 383k
  // page faults in all processes, 240k with 4 MiB). Large pushes are trimmed
  // explicitly after they are applied (ps/service/ps_service.cc).
  mallopt(M_TRIM_THRESHOLD, 4 << 20);
  absl::SetProgramUsageMessage(
      "Runs one pscluster parameter-server task.\n"
      "  ps_server --address=HOST:PORT [--port_file=FILE] [--metrics_address=HOST:PORT]\n"
      "            [--checkpoint_root=DIR] [--checkpoint_quota_bytes=N] [--allow_keyless_jobs]\n"
      "  ps_server --cluster=cluster.yaml --task_index=I    (or TF_CONFIG, task type ps)");
  absl::StatusOr<ServerOptions> parsed = ParseServerCommandLine(argc, argv);
  if (!parsed.ok()) {
    std::cerr << "ps_server: " << parsed.status().message() << "\n";
    return kExitBadFlags;
  }
  ServerOptions& options = *parsed;
  const int64_t max_memory_bytes = absl::GetFlag(FLAGS_max_memory_bytes);
  const int data_plane_port = absl::GetFlag(FLAGS_data_plane_port);
  if (data_plane_port < -1 || data_plane_port > 65535) {
    std::cerr << "ps_server: --data_plane_port must be -1 (none), 0 (any free port) or a port, got "
              << data_plane_port << "\n";
    return kExitBadFlags;
  }
  if (max_memory_bytes < 0) {
    std::cerr << "ps_server: --max_memory_bytes must be >= 0 (0: unlimited), got "
              << max_memory_bytes << "\n";
    return kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_checkpoint_quota_bytes) < 0) {
    std::cerr << "ps_server: --checkpoint_quota_bytes must be >= 0 (0: no quota), got "
              << absl::GetFlag(FLAGS_checkpoint_quota_bytes) << "\n";
    return kExitBadFlags;
  }
  int64_t max_pending_bytes = absl::GetFlag(FLAGS_data_plane_max_pending_bytes);
  if (max_pending_bytes < 0) {
    std::cerr << "ps_server: --data_plane_max_pending_bytes must be >= 0 (0: automatic), got "
              << max_pending_bytes << "\n";
    return kExitBadFlags;
  }
  if (const int threads = absl::GetFlag(FLAGS_data_plane_threads); threads < 0 || threads > 1024) {
    std::cerr << "ps_server: --data_plane_threads must be 0 (automatic) to 1024, got " << threads
              << "\n";
    return kExitBadFlags;
  }
  if (max_pending_bytes == 0) {
    max_pending_bytes = int64_t{1} << 30;
    if (max_memory_bytes > 0) max_pending_bytes = std::min(max_pending_bytes, max_memory_bytes / 2);
  }
  absl::StatusOr<std::optional<ClusterConfig>> cluster =
      ResolveServerCluster(TaskType::kPs, std::getenv("TF_CONFIG"), &options);
  if (!cluster.ok()) {
    std::cerr << "ps_server: " << cluster.status().message() << "\n";
    return kExitBadFlags;
  }
  if (absl::Status s = ConfigureTransport(options.transport); !s.ok()) {
    std::cerr << "ps_server: " << s.message() << "\n";
    return kExitBadFlags;
  }

  // Logs go to stderr: stdout carries only the "listening on" line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ps_server"));
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  if (cluster->has_value()) {
    spdlog::info("cluster task ps {} ({}) of {} ps, {} workers", (*cluster)->task_index,
                 (*cluster)->task_address(), (*cluster)->cluster.ps.size(),
                 (*cluster)->cluster.worker.size());
  }

  // Before any thread starts, so every thread inherits the blocked signals.
  absl::Notification stop;
  OnTerminationSignal([&stop] { stop.Notify(); });
  // A file-size limit (RLIMIT_FSIZE) fails a checkpoint's write with EFBIG
  // instead of killing the PS.
  std::signal(SIGXFSZ, SIG_IGN);

  auto registry = std::make_shared<prometheus::Registry>();
  VariableStore::Options store_options;
  store_options.registry = registry;
  store_options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  if (!store_options.checkpoint_root.empty()) {
    std::error_code ec;  // created if missing (a fresh volume); RealRoot says if that failed
    std::filesystem::create_directories(store_options.checkpoint_root, ec);
    absl::StatusOr<std::string> root = RealRoot(store_options.checkpoint_root, "--checkpoint_root");
    if (!root.ok()) {
      spdlog::error("{}", std::string(root.status().message()));
      return kExitBadFlags;
    }
    spdlog::info("checkpoints under {}", *root);
  } else {
    spdlog::info("no --checkpoint_root: Save and Restore are refused");
  }
  store_options.memory_budget = std::make_shared<MemoryBudget>(max_memory_bytes);
  JobStores jobs(store_options);
  if (!absl::GetFlag(FLAGS_allow_keyless_jobs)) jobs.RequireJobKeys();
  if (const int64_t quota = absl::GetFlag(FLAGS_checkpoint_quota_bytes); quota > 0) {
    jobs.set_checkpoint_quota_bytes(quota);
  }
  ParameterServerService service(&jobs, registry);
  options.health_services = {ParameterServer::service_full_name()};
  auto server = StartServer(options, {&service}, registry);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", server.status().ToString());
    return 1;
  }
  const std::string host = options.address.substr(0, options.address.rfind(':'));
  std::unique_ptr<DataPlaneServer> data_plane;
  if (data_plane_port < 0) {
    spdlog::info("no data plane (--data_plane_port=-1): Push and Pull on gRPC only");
  } else {
    RaiseOpenFileLimit();
    DataPlaneServer::Options dp;
    if (TransportUsesTls()) {
      absl::StatusOr<std::unique_ptr<TlsContext>> tls =
          TlsContext::Create(TlsContext::Side::kServer, TransportTlsPem());
      if (!tls.ok()) {
        spdlog::error("cannot start the data plane's TLS: {}", tls.status().ToString());
        (*server)->Shutdown();
        return 1;
      }
      dp.tls = std::move(*tls);
    }
    dp.port = data_plane_port;
    dp.max_message_bytes = MaxMessageBytes();
    dp.max_pending_bytes = max_pending_bytes;
    dp.serving_threads = absl::GetFlag(FLAGS_data_plane_threads);
    dp.memory_budget = store_options.memory_budget;
    int ignored_port = 0;
    (void)SplitHostPort(options.address, &dp.host, &ignored_port);
    absl::StatusOr<std::unique_ptr<DataPlaneServer>> started =
        DataPlaneServer::Start(dp, &jobs, service.handler());
    if (!started.ok()) {
      spdlog::error("cannot start the data plane: {}", started.status().ToString());
      (*server)->Shutdown();
      return 1;
    }
    data_plane = std::move(*started);
    service.set_data_plane(data_plane.get());
    spdlog::info("data plane (Push, Pull as raw frames{}) on {}:{}",
                 dp.tls != nullptr ? ", mutual TLS" : "", host, data_plane->port());
  }
  std::cout << "ps_server listening on " << host << ":" << (*server)->port() << std::endl;
  spdlog::info("serving ParameterServer on {}:{}", host, (*server)->port());
  (*server)->AddCollectable(std::make_shared<JobStoresMetrics>(&jobs));

  stop.WaitForNotification();
  spdlog::info("signal received, shutting down");
  service.set_data_plane(nullptr);
  if (data_plane != nullptr) data_plane->Shutdown();
  (*server)->Shutdown();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
