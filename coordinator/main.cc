// coordinator: runs jobs on a cluster of PS tasks and workers.
//
//   coordinator --ps=HOST:PORT,... --workers=HOST:PORT,...
//       [--address=127.0.0.1:0] [--port_file=F] [--metrics_address=...]
//   coordinator --cluster=cluster.yaml      (or TF_CONFIG with task type chief)
//   coordinator ... --run_job=job.yaml      (runs one job, exits with its result)
//
// With a cluster (--cluster or TF_CONFIG) the PS and worker addresses come
// from it, and the coordinator listens on the chief's entry unless --address
// is given. --ps/--workers win over TF_CONFIG (psctl local passes them);
// --cluster together with --ps/--workers is an error.
//
// Wiring only: flags, gRPC clients for the cluster, JobManager, the server.
#include <prometheus/registry.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cluster_config.h"
#include "common/confined_path.h"
#include "common/job_paths.h"
#include "common/job_spec.h"
#include "common/update_lease.h"
#include "coordinator/core/job_auth.h"
#include "coordinator/core/cluster_liveness.h"
#include "coordinator/core/cluster_probe.h"
#include "coordinator/core/coordinator_metrics.h"
#include "coordinator/core/job_manager.h"
#include "coordinator/core/worker_roster.h"
#include "coordinator/service/coordinator_service.h"
#include "coordinator/service/grpc_health_checker.h"
#include "coordinator/service/grpc_worker_client.h"
#include "ps/service/remote_ps_client.h"
#include "common/termination_signals.h"
#include "rpc/rpc_util.h"
#include "rpc/server_flags.h"

ABSL_FLAG(std::vector<std::string>, ps, {}, "comma-separated host:port of the PS tasks");
ABSL_FLAG(std::vector<std::string>, workers, {}, "comma-separated host:port of the workers");
ABSL_FLAG(int, max_attempts, 0,
          "runs of one closure before its job fails (0: the job's fault_tolerance.max_attempts)");
ABSL_FLAG(int, cluster_wait_s, 120,
          "seconds a job waits at its start for every PS and worker to answer health checks "
          "before it fails naming the missing tasks");
ABSL_FLAG(int64_t, ps_memory_limit_bytes, int64_t{8} << 30,
          "per-PS memory limit for one job's parameters plus optimizer slots: a submitted job "
          "whose layout needs more on any PS is refused (0: no limit)");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "bearer tokens of the job service, one `USER:TOKEN` (or bare TOKEN) per line: "
          "requests without a listed token are UNAUTHENTICATED, and only a job's submitter may "
          "cancel it. Empty: the job service is open to anyone who can connect.");
ABSL_FLAG(std::string, state_dir, "",
          "durable coordinator state: submitted jobs are recorded here, and a coordinator "
          "restarted on the same directory resumes the jobs that had not ended");
ABSL_FLAG(std::string, checkpoint_root, "",
          "directory every job's checkpoint.dir must lie under (a relative checkpoint.dir is "
          "taken relative to it); the PS get checkpoint names relative to it and resolve them "
          "under their own --checkpoint_root (the same storage). With --state_dir, a job "
          "without checkpoint.dir checkpoints into <checkpoint_root>/<job id>. Empty (default): "
          "jobs that set checkpoint.dir are refused, and jobs have no checkpoints");
ABSL_FLAG(std::string, run_job, "",
          "a job spec (YAML) to submit at start; the coordinator then serves until that job "
          "ends and exits 0 if it SUCCEEDED, 1 if it failed or was cancelled (a Kubeflow "
          "TFJob's Chief: the TFJob succeeds when its chief exits 0). With --state_dir, a "
          "restarted coordinator that resumes an unfinished job of the same name follows that "
          "job instead of submitting another. SIGTERM/SIGINT: exit 128+signal, job not ended");
ABSL_FLAG(std::string, join_token_file, "",
          "elastic workers (docs/elastic_workers.md): a file whose first line is the secret a "
          "worker_server started with --coordinator=THIS --join_token_file=SAME shows to join "
          "the cluster while jobs run, and to leave it on SIGTERM (with TLS it also needs a "
          "certificate that may be a worker's). Empty: the workers are fixed and "
          "RegisterWorker is refused");
ABSL_FLAG(int, job_ps, 0,
          "elastic PS (docs/elastic_ps.md): jobs start on the first N of the --ps tasks; the "
          "others are spare, for `psctl rescale JOB --ps N` (RescaleJob). 0: all of them");
ABSL_FLAG(std::vector<std::string>, data_root, {pscluster::kDefaultDataRoot},
          "comma-separated directories a job's data files must lie under (symlinks resolved); "
          "a job naming another file is refused. Default: /usr/share/datasets, where Debian's "
          "dataset packages install (dataset-fashion-mnist)");

namespace {

// --run_job: the id of the job to follow. A job of the same name that this
// coordinator resumed (Recover: it had not ended when a previous process
// stopped) is followed rather than submitted twice; otherwise the spec is
// submitted as the coordinator's own (owner "chief").
absl::StatusOr<std::string> StartRunJob(pscluster::JobManager& jobs, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--run_job: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<pscluster::JobSpec> spec = pscluster::ParseJobSpec(text.str(), path);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--run_job ", path, ": ", spec.status().message()));
  }
  for (const pscluster::JobStatusProto& job : jobs.List()) {
    if (job.name() == spec->name &&
        (job.state() == pscluster::QUEUED || job.state() == pscluster::RUNNING)) {
      spdlog::info("--run_job: following resumed job {} ({})", job.job_id(), job.name());
      return job.job_id();
    }
  }
  absl::StatusOr<pscluster::SubmitJobResponse> submitted = jobs.Submit(text.str(), path, "chief");
  if (!submitted.ok()) {
    return absl::Status(submitted.status().code(),
                        absl::StrCat("--run_job ", path, ": ", submitted.status().message()));
  }
  spdlog::info("--run_job: submitted {} as job {}", path, submitted->job_id());
  return submitted->job_id();
}

// Waits until job `id` ends (returns its final status) or a SIGINT/SIGTERM
// arrives (returns the signal in `signal`). Polls: the job's status is a
// cheap read, and a signal must not wait for the job's next change.
absl::StatusOr<pscluster::JobStatusProto> FollowRunJob(pscluster::JobManager& jobs,
                                                        const std::string& id, int* signal) {
  while (true) {
    absl::StatusOr<pscluster::JobStatusProto> status = jobs.Get(id);
    if (!status.ok()) return status.status();
    if (status->state() == pscluster::SUCCEEDED || status->state() == pscluster::FAILED ||
        status->state() == pscluster::CANCELLED) {
      return status;
    }
    if ((*signal = pscluster::TakePendingTerminationSignal()) != 0) return status;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Serves the pscluster coordinator.\n"
      "  coordinator --ps=HOST:PORT,... --workers=HOST:PORT,... [--address=HOST:PORT]\n"
      "  coordinator --cluster=cluster.yaml    (or TF_CONFIG, task type chief)\n"
      "  [--checkpoint_root=DIR] [--data_root=DIR,...] [--state_dir=DIR] [--run_job=JOB.yaml]");
  absl::StatusOr<pscluster::ServerOptions> options = pscluster::ParseServerCommandLine(argc, argv);
  if (!options.ok()) {
    std::cerr << "coordinator: " << options.status().message() << "\n";
    return pscluster::kExitBadFlags;
  }
  std::vector<std::string> ps_addresses = absl::GetFlag(FLAGS_ps);
  std::vector<std::string> worker_addresses = absl::GetFlag(FLAGS_workers);
  const bool addresses_given = !ps_addresses.empty() || !worker_addresses.empty();
  // Explicit --ps/--workers win over TF_CONFIG (psctl local passes them).
  const char* tf_config = std::getenv("TF_CONFIG");
  const bool tf_config_ignored = addresses_given && tf_config != nullptr && tf_config[0] != '\0';
  absl::StatusOr<std::optional<pscluster::ClusterConfig>> cluster =
      pscluster::ResolveServerCluster(pscluster::TaskType::kChief,
                                      addresses_given ? nullptr : tf_config, &*options);
  if (!cluster.ok()) {
    std::cerr << "coordinator: " << cluster.status().message() << "\n";
    return pscluster::kExitBadFlags;
  }
  if (absl::Status s = pscluster::ConfigureTransport(options->transport); !s.ok()) {
    std::cerr << "coordinator: " << s.message() << "\n";
    return pscluster::kExitBadFlags;
  }
  pscluster::JobAuth auth;
  if (const std::string tokens = absl::GetFlag(FLAGS_auth_tokens_file); !tokens.empty()) {
    absl::StatusOr<pscluster::JobAuth> loaded = pscluster::JobAuth::FromFile(tokens);
    if (!loaded.ok()) {
      std::cerr << "coordinator: --auth_tokens_file: " << loaded.status().message() << "\n";
      return pscluster::kExitBadFlags;
    }
    auth = *std::move(loaded);
  }
  if (cluster->has_value()) {
    if (addresses_given) {
      std::cerr << "coordinator: give either --cluster or --ps/--workers, not both\n";
      return pscluster::kExitBadFlags;
    }
    ps_addresses = (*cluster)->cluster.ps;
    worker_addresses = (*cluster)->cluster.worker;
  }
  if (worker_addresses.empty()) {
    std::cerr << "coordinator: --workers must name at least one host:port (or give the "
                 "cluster: --cluster FILE or TF_CONFIG)\n";
    return pscluster::kExitBadFlags;
  }
  for (const auto* list : {&ps_addresses, &worker_addresses}) {
    for (const std::string& a : *list) {
      if (absl::Status s = pscluster::CheckHostPort(a); !s.ok()) {
        std::cerr << "coordinator: " << (list == &ps_addresses ? "--ps: " : "--workers: ")
                  << s.message() << "\n";
        return pscluster::kExitBadFlags;
      }
    }
  }
  if (absl::GetFlag(FLAGS_ps_memory_limit_bytes) < 0) {
    std::cerr << "coordinator: --ps_memory_limit_bytes must be >= 0\n";
    return pscluster::kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_max_attempts) < 0) {
    std::cerr << "coordinator: --max_attempts must be >= 0\n";
    return pscluster::kExitBadFlags;
  }
  if (absl::GetFlag(FLAGS_cluster_wait_s) < 0) {
    std::cerr << "coordinator: --cluster_wait_s must be >= 0\n";
    return pscluster::kExitBadFlags;
  }
  // Logs go to stderr: stdout carries only the "listening on" line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("coordinator"));
  spdlog::set_level(spdlog::level::from_str(options->log_level));
  if (tf_config_ignored) spdlog::warn("TF_CONFIG ignored: --ps/--workers given");
  if (cluster->has_value()) {
    spdlog::info("cluster task chief {} ({}): {} ps, {} workers", (*cluster)->task_index,
                 (*cluster)->task_address(), ps_addresses.size(), worker_addresses.size());
  }
  pscluster::BlockTerminationSignals();
  // A file-size limit (RLIMIT_FSIZE) fails the write (EFBIG), which fails the
  // checkpoint or job log write, instead of killing the coordinator.
  std::signal(SIGXFSZ, SIG_IGN);
  auto registry = std::make_shared<prometheus::Registry>();

  std::vector<std::unique_ptr<pscluster::RemotePsClient>> ps_clients;
  std::vector<pscluster::PsClient*> ps;
  for (const std::string& a : ps_addresses) {
    pscluster::RemotePsClient::Options o;
    o.target = a;
    o.wait_for_ready = true;  // PS tasks may still be starting
    ps_clients.push_back(std::make_unique<pscluster::RemotePsClient>(o));
    ps.push_back(ps_clients.back().get());
  }
  std::vector<std::unique_ptr<pscluster::GrpcWorkerClient>> worker_clients;
  std::vector<pscluster::WorkerClient*> workers;
  // strategy: multi_worker_mirrored: each worker's copy of a job's
  // variables, served by the worker as a ParameterServer.
  std::vector<std::unique_ptr<pscluster::RemotePsClient>> copy_clients;
  std::vector<pscluster::PsClient*> copies;
  for (const std::string& a : worker_addresses) {
    worker_clients.push_back(std::make_unique<pscluster::GrpcWorkerClient>(a));
    workers.push_back(worker_clients.back().get());
    pscluster::RemotePsClient::Options o;
    o.target = a;
    o.wait_for_ready = true;
    copy_clients.push_back(std::make_unique<pscluster::RemotePsClient>(o));
    copies.push_back(copy_clients.back().get());
  }
  pscluster::GrpcHealthChecker health(ps_addresses, worker_addresses);
  // The one record of which workers answer, shared by the readiness probe
  // and every job's health loop (cluster_liveness.h): a worker is asked at
  // most once an interval, and not at all while it answers its closures.
  pscluster::ClusterLiveness liveness(&health);
  // Elastic workers: the roster the cluster's workers start it, those that
  // register join it (a client and a health check each, at its index).
  std::string join_token;
  if (const std::string file = absl::GetFlag(FLAGS_join_token_file); !file.empty()) {
    std::ifstream in(file);
    std::getline(in, join_token);
    while (!join_token.empty() && std::isspace(static_cast<unsigned char>(join_token.back()))) {
      join_token.pop_back();
    }
    if (!in && join_token.empty()) {
      std::cerr << "coordinator: --join_token_file: cannot read " << file << "\n";
      return pscluster::kExitBadFlags;
    }
    if (join_token.size() < 16) {
      std::cerr << "coordinator: --join_token_file: " << file
                << ": the token (first line) must have at least 16 characters\n";
      return pscluster::kExitBadFlags;
    }
  }
  std::unique_ptr<pscluster::WorkerRoster> roster;
  if (!join_token.empty()) {
    pscluster::WorkerRoster::Options o;
    o.probe = [](const std::string& address) {
      pscluster::GrpcHealthChecker once({}, {address}, std::chrono::milliseconds(2000));
      return once.CheckWorker(0);
    };
    o.connect = [&health](const std::string& address, int index)
        -> std::unique_ptr<pscluster::WorkerClient> {
      const int checked = health.AddWorker(address);
      if (checked != index) {
        spdlog::error("worker {} joined as {} but is health-checked as {}", address, index,
                      checked);
      }
      spdlog::info("worker {} joined the cluster as worker {}", address, index);
      return std::make_unique<pscluster::GrpcWorkerClient>(address);
    };
    roster = std::make_unique<pscluster::WorkerRoster>(workers, std::move(o));
  }
  pscluster::JobRunnerOptions runner_options;
  runner_options.roster = roster.get();
  runner_options.ps_addresses = ps_addresses;
  runner_options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  runner_options.job_ps = absl::GetFlag(FLAGS_job_ps);
  if (runner_options.job_ps < 0 ||
      runner_options.job_ps > static_cast<int>(ps_addresses.size())) {
    std::cerr << "coordinator: --job_ps=" << runner_options.job_ps << " must lie in [0, "
              << ps_addresses.size() << "] (the number of --ps tasks)\n";
    return pscluster::kExitBadFlags;
  }
  runner_options.health = &liveness;
  runner_options.cluster_wait = absl::Seconds(absl::GetFlag(FLAGS_cluster_wait_s));
  runner_options.worker_addresses = worker_addresses;
  runner_options.worker_ps = copies;
  // A joiner's copy of a multi_worker_mirrored job (the ring re-forms over it).
  runner_options.connect_copy = [](const std::string& address) {
    pscluster::RemotePsClient::Options o;
    o.target = address;
    o.wait_for_ready = true;
    return std::unique_ptr<pscluster::PsClient>(std::make_unique<pscluster::RemotePsClient>(o));
  };
  runner_options.ps_memory_limit_bytes = absl::GetFlag(FLAGS_ps_memory_limit_bytes);
  runner_options.registry = registry;
  runner_options.data_roots = absl::GetFlag(FLAGS_data_root);
  if (runner_options.data_roots.empty()) {
    std::cerr << "coordinator: --data_root must name at least one directory\n";
    return pscluster::kExitBadFlags;
  }
  if (const std::string root = absl::GetFlag(FLAGS_checkpoint_root); !root.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(root, ec);  // the checkpoints' storage, ours to lay out
    absl::StatusOr<std::string> real = pscluster::RealRoot(root, "--checkpoint_root");
    if (!real.ok()) {
      std::cerr << "coordinator: " << real.status().message() << "\n";
      return pscluster::kExitBadFlags;
    }
    runner_options.checkpoint_root = *real;
  }
  spdlog::info("data roots {}; {}", absl::StrJoin(runner_options.data_roots, ","),
               runner_options.checkpoint_root.empty()
                   ? std::string("no --checkpoint_root: jobs run without checkpoints")
                   : "checkpoints under " + runner_options.checkpoint_root);
  // The secret job keys are derived from (common/update_lease.h): kept in the
  // state directory so that a restarted coordinator derives the same keys for
  // the jobs it resumes; random per process without one.
  if (const std::string dir = absl::GetFlag(FLAGS_state_dir); !dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    absl::StatusOr<std::string> secret = pscluster::LoadOrCreateSecret(dir + "/lease_secret");
    if (!secret.ok()) {
      std::cerr << "coordinator: --state_dir: " << secret.status().message() << "\n";
      return 1;
    }
    runner_options.lease_secret = *std::move(secret);
  } else {
    runner_options.lease_secret = pscluster::RandomSecret();
  }
  auto metrics = std::make_shared<pscluster::CoordinatorMetrics>();
  runner_options.metrics = metrics.get();
  auto jobs = std::make_unique<pscluster::JobManager>(ps, workers, runner_options,
                                                      absl::GetFlag(FLAGS_state_dir));
  absl::StatusOr<int> resumed = jobs->Recover();
  if (!resumed.ok()) {
    std::cerr << "coordinator: " << resumed.status().message() << "\n";
    return 1;
  }
  if (*resumed > 0) spdlog::info("coordinator resumed {} unfinished job(s)", *resumed);
  if (!auth.enabled()) {
    spdlog::warn("the job service is open to anyone who can connect (no --auth_tokens_file)");
  } else if (!pscluster::TransportUsesTls()) {
    spdlog::warn("bearer tokens travel in plaintext without TLS (--tls_cert/--tls_key/--tls_ca)");
  }
  pscluster::CoordinatorService service(jobs.get(), registry, std::move(auth));
  if (roster != nullptr) {
    service.EnableRegistration(roster.get(), join_token);
    spdlog::info("elastic workers: workers may join with --coordinator and the join token");
  }
  metrics->SetJobSource([manager = jobs.get()] { return manager->List(); });

  options->health_services = {pscluster::Coordinator::service_full_name()};
  auto server = pscluster::StartServer(*options, {&service}, registry);
  if (!server.ok()) {
    std::cerr << "coordinator: " << server.status().message() << "\n";
    return 1;
  }
  (*server)->AddCollectable(metrics);
  // The coordinator's service is NOT_SERVING (pscluster.Coordinator: what a
  // readiness probe asks) while some PS or worker does not answer its health
  // checks; the server as a whole ("": what a liveness probe asks) stays
  // SERVING, so that a coordinator waiting for its cluster is not restarted.
  pscluster::ClusterProbe::Options probe_options;
  probe_options.num_ps = static_cast<int>(ps_addresses.size());
  probe_options.num_workers = static_cast<int>(worker_addresses.size());
  probe_options.metrics = metrics.get();
  if (roster != nullptr) {
    probe_options.worker_indices = [r = roster.get()] { return r->ActiveIndices(); };
  }
  probe_options.on_reachable = [running = server->get()](bool reachable) {
    if (!reachable) spdlog::warn("cluster not reachable: health NOT_SERVING until every task answers");
    running->SetServing(pscluster::Coordinator::service_full_name(), reachable);
  };
  auto probe = std::make_unique<pscluster::ClusterProbe>(&liveness, probe_options);
  const std::string host = options->address.substr(0, options->address.rfind(':'));
  std::printf("coordinator listening on %s:%d\n", host.c_str(), (*server)->port());
  std::fflush(stdout);
  spdlog::info("coordinator serving on port {} for {} PS and {} workers", (*server)->port(),
               ps.size(), workers.size());
  int exit_code = 0;
  if (const std::string run_job = absl::GetFlag(FLAGS_run_job); !run_job.empty()) {
    absl::StatusOr<std::string> id = StartRunJob(*jobs, run_job);
    int signal = 0;
    absl::StatusOr<pscluster::JobStatusProto> final_status =
        id.ok() ? FollowRunJob(*jobs, *id, &signal) : id.status();
    if (!final_status.ok()) {
      std::cerr << "coordinator: " << final_status.status().message() << "\n";
      exit_code = 1;
    } else if (signal != 0) {
      spdlog::info("--run_job: signal {} before job {} ended", signal, *id);
      exit_code = 128 + signal;
    } else {
      const pscluster::JobStatusProto& s = *final_status;
      std::printf("job %s %s: %s after %lld steps, eval accuracy %.4f%s%s\n", s.job_id().c_str(),
                  s.name().c_str(), pscluster::JobState_Name(s.state()).c_str(),
                  static_cast<long long>(s.steps()), s.eval_accuracy(),
                  s.error().empty() ? "" : ", error: ", s.error().c_str());
      std::fflush(stdout);
      exit_code = s.state() == pscluster::SUCCEEDED ? 0 : 1;
    }
  } else {
    pscluster::WaitForTerminationSignal();
  }
  spdlog::info("coordinator shutting down");
  probe.reset();
  (*server)->Shutdown();
  metrics->SetJobSource(nullptr);  // the metrics endpoint outlives the manager
  jobs.reset();  // cancels and joins running jobs
  return exit_code;
}
