// The worker server's body, shared by worker_server (worker/main.cc) and the
// worker binaries users build around their own functions
// (api/pscluster/function_worker.h): flags, the WorkerState with gRPC PS
// clients, the server, until SIGTERM.
#include "worker/worker_server_main.h"

#include <prometheus/registry.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <memory>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_config.h"
#include "common/confined_path.h"
#include "common/job_paths.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"
#include "ps/core/memory_budget.h"
#include "ps/service/ps_service.h"
#include "ps/service/remote_ps_client.h"
#include "common/termination_signals.h"
#include "rpc/rpc_util.h"
#include "rpc/server_flags.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/collective.h"
#include "worker/core/mirrored_ps_client.h"
#include "worker/cluster_membership.h"
#include "worker/core/worker_state.h"
#include "worker/service/collective_service.h"
#include "worker/service/worker_service.h"

ABSL_FLAG(int, ps_timeout_ms, 30000, "deadline of each Pull/Push to a PS");
ABSL_FLAG(std::vector<std::string>, data_root, {pscluster::kDefaultDataRoot},
          "comma-separated directories a job's data files must lie under (symlinks resolved): "
          "SetupJob of a job naming another file is INVALID_ARGUMENT (the coordinator checks "
          "its own --data_root first). Default: /usr/share/datasets");
ABSL_FLAG(std::string, checkpoint_root, "",
          "strategy multi_worker_mirrored: the directory the worker's copy of a job's variables "
          "is checkpointed under and restored from (as ps_server --checkpoint_root; the "
          "coordinator's --checkpoint_root storage). Empty: such jobs run without checkpoints");
ABSL_FLAG(double, collective_timeout_s, 30,
          "strategy multi_worker_mirrored: how long a step's all-reduce waits for the other "
          "workers before it fails (and the coordinator rolls the job back)");
ABSL_FLAG(int64_t, max_memory_bytes, int64_t{8} << 30,
          "strategy multi_worker_mirrored: most bytes of parameters plus optimizer slots this "
          "worker's copies of jobs' variables may hold (CreateVariables and Restore past it are "
          "RESOURCE_EXHAUSTED); 0: unlimited. Default 8 GiB, as ps_server's.");
ABSL_FLAG(double, job_hold_timeout_s, 600,
          "a job set up by a coordinator holds this worker: another job's SetupJob is refused "
          "unless that coordinator releases it, or until it has sent no signed request for "
          "this long (it is gone)");
ABSL_FLAG(std::string, coordinator, "",
          "elastic workers (docs/elastic_workers.md): the coordinator's host:port. The worker "
          "registers there once it serves (with --join_token_file), joining a running job within "
          "seconds, and on SIGTERM leaves gracefully: the coordinator stops dispatching to it, "
          "its closures in flight finish, and it exits 0. Empty: a fixed member of the cluster "
          "file / --workers (SIGTERM just stops it)");
ABSL_FLAG(std::string, join_token_file, "",
          "with --coordinator: the file holding the coordinator's join token (its "
          "--join_token_file)");
ABSL_FLAG(std::string, advertise_address, "",
          "with --coordinator: the host:port the coordinator reaches this worker at. Default: "
          "--address's host (this machine's hostname for 0.0.0.0) and the port it serves on");
ABSL_FLAG(double, leave_timeout_s, 60,
          "with --coordinator: on SIGTERM, how long the coordinator may wait for this worker's "
          "closures in flight before it exits anyway (what is left is re-run elsewhere, not "
          "counted as a failure)");
ABSL_FLAG(int, compute_threads, 0,
          "threads of the CPU backend's matrix products (OpenBLAS); 0: one per core. Give "
          "workers that share a machine a share of its cores, and a worker of jobs with "
          "`devices: N` 1/N of its share (psctl local does both).");

namespace pscluster {
namespace {

// --coordinator and its flags, for ClusterMembership; `host` and `port`
// are where this worker serves.
absl::StatusOr<ClusterMembership::Options> MembershipOptions(const std::string& coordinator,
                                                             const std::string& host, int port) {
  ClusterMembership::Options o;
  o.coordinator = coordinator;
  if (absl::Status s = CheckHostPort(coordinator); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--coordinator: ", s.message()));
  }
  const std::string token_file = absl::GetFlag(FLAGS_join_token_file);
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) return absl::InvalidArgumentError("--join_token_file: cannot read " + token_file);
    std::getline(in, o.join_token);
    while (!o.join_token.empty() && std::isspace(static_cast<unsigned char>(o.join_token.back()))) {
      o.join_token.pop_back();
    }
  }
  o.address = absl::GetFlag(FLAGS_advertise_address);
  if (o.address.empty()) {
    std::string h = host;
    if (h.empty() || h == "0.0.0.0" || h == "[::]" || h == "::") {
      char name[256] = {0};
      if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
        return absl::InvalidArgumentError(
            "--advertise_address: this worker listens on every interface and has no hostname; "
            "say where the coordinator reaches it");
      }
      h = name;
    }
    o.address = absl::StrCat(h, ":", port);
  }
  if (absl::Status s = CheckHostPort(o.address); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--advertise_address: ", s.message()));
  }
  const double leave = absl::GetFlag(FLAGS_leave_timeout_s);
  if (!(leave >= 0)) return absl::InvalidArgumentError("--leave_timeout_s must be >= 0");
  o.leave_wait = absl::Seconds(leave);
  return o;
}

}  // namespace

int RunWorkerServer(int argc, char** argv, const WorkerServerOptions& worker) {
  const std::string name = worker.name;
  absl::SetProgramUsageMessage(absl::StrCat(
      "Serves a pscluster worker task.\n"
      "  ", name, " --address=HOST:PORT [--port_file=FILE] [--metrics_address=HOST:PORT]\n"
      "                [--data_root=DIR,...]\n"
      "  ", name, " --cluster=cluster.yaml --task_index=I    (or TF_CONFIG, task type worker)"));
  absl::StatusOr<pscluster::ServerOptions> options = pscluster::ParseServerCommandLine(argc, argv);
  if (!options.ok()) {
    std::cerr << name << ": " << options.status().message() << "\n";
    return pscluster::kExitBadFlags;
  }
  absl::StatusOr<std::optional<pscluster::ClusterConfig>> cluster = pscluster::ResolveServerCluster(
      pscluster::TaskType::kWorker, std::getenv("TF_CONFIG"), &*options);
  if (!cluster.ok()) {
    std::cerr << name << ": " << cluster.status().message() << "\n";
    return pscluster::kExitBadFlags;
  }
  if (absl::Status s = pscluster::ConfigureTransport(options->transport); !s.ok()) {
    std::cerr << name << ": " << s.message() << "\n";
    return pscluster::kExitBadFlags;
  }
  // Logs go to stderr: stdout carries only the "listening on" line.
  spdlog::set_default_logger(spdlog::stderr_color_mt(name));
  spdlog::set_level(spdlog::level::from_str(options->log_level));
  if (cluster->has_value()) {
    // The PS addresses come from the coordinator's SetupJob, not from here.
    spdlog::info("cluster task worker {} ({}) of {} workers", (*cluster)->task_index,
                 (*cluster)->task_address(), (*cluster)->cluster.worker.size());
  }
  pscluster::BlockTerminationSignals();
  pscluster::SetCpuComputeThreads(absl::GetFlag(FLAGS_compute_threads));
  auto registry = std::make_shared<prometheus::Registry>();
  const int ps_timeout_ms = absl::GetFlag(FLAGS_ps_timeout_ms);
  const std::vector<std::string> data_roots = absl::GetFlag(FLAGS_data_root);
  if (data_roots.empty()) {
    std::cerr << "worker_server: --data_root must name at least one directory\n";
    return pscluster::kExitBadFlags;
  }
  pscluster::WorkerState state(
      [ps_timeout_ms](const std::string& address) {
        pscluster::RemotePsClient::Options o;
        o.target = address;
        o.call_timeout = std::chrono::milliseconds(ps_timeout_ms);
        return std::make_unique<pscluster::RemotePsClient>(o);
      },
      data_roots);
  if (absl::GetFlag(FLAGS_job_hold_timeout_s) <= 0) {
    std::cerr << "worker_server: --job_hold_timeout_s must be > 0\n";
    return pscluster::kExitBadFlags;
  }
  state.set_hold_timeout(absl::Seconds(absl::GetFlag(FLAGS_job_hold_timeout_s)));
  state.set_function_runner(worker.functions);
  // multi_worker_mirrored: this worker's copies of jobs' variables, served
  // to the coordinator as a ParameterServer, and the ring's mailbox.
  pscluster::VariableStore::Options store_options;
  store_options.registry = registry;
  store_options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  if (!store_options.checkpoint_root.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(store_options.checkpoint_root, ec);
    absl::StatusOr<std::string> real =
        pscluster::RealRoot(store_options.checkpoint_root, "--checkpoint_root");
    if (!real.ok()) {
      std::cerr << name << ": " << real.status().message() << "\n";
      return pscluster::kExitBadFlags;
    }
    store_options.checkpoint_root = *real;
  }
  if (absl::GetFlag(FLAGS_max_memory_bytes) < 0) {
    std::cerr << "worker_server: --max_memory_bytes must be >= 0 (0: unlimited)\n";
    return pscluster::kExitBadFlags;
  }
  store_options.memory_budget =
      std::make_shared<pscluster::MemoryBudget>(absl::GetFlag(FLAGS_max_memory_bytes));
  pscluster::JobStores mirrors(store_options);
  mirrors.RequireJobKeys();  // only a coordinator creates a worker's copies
  pscluster::CollectiveMailbox mailbox;
  const absl::Duration collective_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_s));
  state.set_mirror_factory(
      [&mirrors, &mailbox, collective_timeout](const pscluster::SetupJobRequest& request)
          -> absl::StatusOr<std::unique_ptr<pscluster::PsClient>> {
        if (request.worker_addresses_size() < 1) {
          return absl::InvalidArgumentError(
              "SetupJob of a multi_worker_mirrored job names no worker_addresses (the ring)");
        }
        auto peers = std::make_shared<pscluster::GrpcCollectivePeers>(
            std::vector<std::string>(request.worker_addresses().begin(),
                                     request.worker_addresses().end()),
            collective_timeout);
        pscluster::MirroredPsClient::Options o;
        o.job_id = request.job_id();
        o.collective_timeout = collective_timeout;
        return std::make_unique<pscluster::MirroredPsClient>(
            std::make_unique<pscluster::InProcessPsClient>(&mirrors), &mailbox, std::move(peers),
            o);
      });
  pscluster::WorkerService service(&state, registry);
  pscluster::ParameterServerService mirror_service(&mirrors, registry);
  pscluster::CollectiveService collective_service(&mailbox, registry);
  options->health_services = {pscluster::Worker::service_full_name()};
  auto server = pscluster::StartServer(*options, {&service, &mirror_service, &collective_service},
                                       registry);
  if (!server.ok()) {
    std::cerr << name << ": " << server.status().message() << "\n";
    return 1;
  }
  const std::string host = options->address.substr(0, options->address.rfind(':'));
  std::printf("%s listening on %s:%d\n", name.c_str(), host.c_str(), (*server)->port());
  std::fflush(stdout);
  spdlog::info("worker serving on port {}, metrics port {}", (*server)->port(),
               (*server)->metrics_port());
  // Elastic workers: join the coordinator's cluster now, leave it on SIGTERM.
  std::unique_ptr<pscluster::ClusterMembership> membership;
  if (const std::string coordinator = absl::GetFlag(FLAGS_coordinator); !coordinator.empty()) {
    absl::StatusOr<pscluster::ClusterMembership::Options> m =
        MembershipOptions(coordinator, host, (*server)->port());
    absl::Status s = m.status();
    if (s.ok()) {
      membership = std::make_unique<pscluster::ClusterMembership>(*std::move(m));
      s = membership->Join();
    }
    if (!s.ok()) {
      std::cerr << name << ": " << s.message() << "\n";
      (*server)->Shutdown();
      return 1;
    }
  }
  pscluster::WaitForTerminationSignal();
  if (membership != nullptr) {
    // A preemption notice: the coordinator stops dispatching here and
    // answers once the closures in flight finished.
    spdlog::info("leaving the cluster: waiting for the closures in flight");
    int in_flight = 0;
    if (absl::Status s = membership->Leave(&in_flight); !s.ok()) {
      spdlog::warn("{}; shutting down anyway", std::string(s.message()));
    } else if (in_flight > 0) {
      spdlog::warn("left the cluster with {} closure call(s) still in flight after "
                   "--leave_timeout_s; they are re-run elsewhere",
                   in_flight);
    } else {
      spdlog::info("left the cluster with nothing in flight");
    }
  }
  spdlog::info("worker shutting down");
  (*server)->Shutdown();
  return 0;
}

}  // namespace pscluster
