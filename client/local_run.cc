#include "client/local_run.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/job_watch.h"
#include "client/describe.h"
#include "client/exit_codes.h"
#include "client/local_cluster.h"
#include "client/local_roots.h"
#include "client/local_setup.h"
#include "client/local_tls.h"
#include "client/progress.h"
#include "client/result_json.h"
#include "common/termination_signals.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

constexpr int kExitSucceeded = kExitOk;
constexpr int kExitFailed = kExitJobFailed;
constexpr int kExitBadInput = kExitUsage;
constexpr int kLogTailLines = 20;
constexpr absl::Duration kRpcTimeout = absl::Seconds(10);
constexpr absl::Duration kStopGrace = absl::Seconds(5);
// How long psctl waits for a restarted coordinator to answer for the job
// again when --timeout_s does not bound it.
constexpr absl::Duration kCoordinatorComeback = absl::Seconds(120);

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

absl::Status CancelJob(Coordinator::Stub* stub, const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, ToChrono(kRpcTimeout));
  ctx.set_wait_for_ready(true);  // see SubmitJob below
  CancelJobRequest request;
  request.set_job_id(job_id);
  CancelJobResponse response;
  return FromGrpcStatus(stub->CancelJob(&ctx, request, &response));
}

// Prints the outcome: one JSON/YAML object, or the text summary, plus the
// error on stderr when the job did not succeed. A run that trained nothing
// because its checkpoint already covered every epoch says so (on stderr too
// with -o json|yaml, whose consumers see "already_complete").
int Report(const RunResult& result, const LocalRunOptions& options, int exit_code,
           const std::string& checkpoint_dir) {
  if (options.output != OutputFormat::kText) {
    if (result.status.already_complete()) {
      std::fprintf(stderr, "psctl: %s\n",
                   AlreadyCompleteNotice(result.status, checkpoint_dir).c_str());
    }
    PrintStructured(RunResultJson(result), options.output);
  } else {
    std::printf("%s", FormatSummary(result.status, checkpoint_dir).c_str());
    if (result.describe) std::printf("\n%s", FormatDescribe(*result.describe).c_str());
    std::fflush(stdout);  // keep stdout and stderr in order when both are files
    if (exit_code != kExitSucceeded && !result.status.error().empty()) {
      std::fprintf(stderr, "psctl: %s\n", result.status.error().c_str());
    }
  }
  std::fflush(stdout);
  return exit_code;
}

// A temporary run directory outlives a run that did not succeed (its logs
// say why); the user is told where. Bad input (exit 2) trained nothing worth
// keeping.
void KeepRunDirOnFailure(RunDir* run_dir, int exit_code, JobState state) {
  if (exit_code == kExitSucceeded || exit_code == kExitBadInput) return;
  const char* what = state == CANCELLED ? "was cancelled" : "failed";
  if (run_dir->removes()) run_dir->Keep();
  std::fprintf(stderr, "psctl: the job %s; logs are kept in %s\n", what,
               run_dir->path().c_str());
}

// Passes --log_level=LEVEL to the coordinator and the workers if their
// binary lists the flag (PS flags are not configurable in LocalCluster).
void AddLogLevel(LocalClusterOptions* cluster_options, const std::string& level) {
  if (level.empty()) return;
  const std::string scratch = cluster_options->run_dir + "/log_level.helpfull";
  auto has = [&](const std::string& bin) {
    absl::StatusOr<bool> r = BinaryHasFlag(bin, "log_level", scratch);
    unlink(scratch.c_str());
    return r.ok() && *r;
  };
  const std::string flag = "--log_level=" + level;
  if (has(cluster_options->coordinator_bin)) cluster_options->coordinator_flags.push_back(flag);
  if (has(cluster_options->worker_server_bin)) cluster_options->worker_flags.push_back(flag);
}

// Gives the coordinator --state_dir=RUN_DIR/coordinator-state (fresh for
// this run) if it knows the flag, so that a restarted coordinator resumes the
// job under the same id. A coordinator without the flag still runs; its
// restart loses the job (psctl then reports it).
// Returns whether it did.
bool AddCoordinatorStateDir(LocalClusterOptions* cluster_options) {
  const std::string& run_dir = cluster_options->run_dir;
  const std::string scratch = run_dir + "/coordinator.helpfull";
  absl::StatusOr<bool> has =
      BinaryHasFlag(cluster_options->coordinator_bin, "state_dir", scratch);
  unlink(scratch.c_str());
  if (!has.ok()) {
    std::fprintf(stderr, "psctl: cannot list the coordinator's flags (%s); not passing "
                 "--state_dir\n", std::string(has.status().message()).c_str());
    return false;
  }
  if (!*has) return false;
  // A state dir left by an earlier run in the same --run_dir would make the
  // new coordinator resume that run's jobs.
  const std::string state_dir = run_dir + "/coordinator-state";
  std::error_code ec;
  std::filesystem::remove_all(state_dir, ec);
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    std::fprintf(stderr, "psctl: cannot create %s: %s; not passing --state_dir\n",
                 state_dir.c_str(), ec.message().c_str());
    return false;
  }
  cluster_options->coordinator_flags.push_back("--state_dir=" + state_dir);
  return true;
}

}  // namespace

int RunParameterServerJob(const JobSpec& spec, const LocalRunOptions& options) {
  // Every thread started from here on (gRPC's included) inherits the mask,
  // so SIGINT/SIGTERM stay pending until TakePendingTerminationSignal collects them.
  const sigset_t signals = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // -o json|yaml: stdout holds nothing but the result object.
  const bool json = options.output != OutputFormat::kText;
  std::FILE* info = json ? stderr : stdout;
  RunResult result;
  result.strategy = StrategyName(spec.strategy);
  // multi_worker_mirrored has no PS: the workers hold the model.
  const bool mirrored = spec.strategy == Strategy::kMultiWorkerMirrored;
  const int num_ps = mirrored ? 0 : options.num_ps;
  result.ps = num_ps;
  result.workers = options.num_workers;
  result.status.set_name(spec.name);
  std::unique_ptr<RunDir> run_dir_holder;  // set below; outlives every Report
  auto report = [&](int code) {
    if (run_dir_holder) KeepRunDirOnFailure(run_dir_holder.get(), code, result.status.state());
    return Report(result, options, code, spec.checkpoint.dir);
  };
  auto fail = [&](JobState state, const std::string& error, int code) {
    result.status.set_state(state);
    result.status.set_error(error);
    return report(code);
  };

  absl::StatusOr<LocalClusterOptions> prepared =
      LocalClusterOptionsFor(options, num_ps, static_cast<int>(spec.devices));
  if (!prepared.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(prepared.status().message()).c_str());
    return kExitBadInput;
  }
  LocalClusterOptions cluster_options = *std::move(prepared);
  cluster_options.job_ps = mirrored ? 0 : options.job_ps;
  absl::StatusOr<std::unique_ptr<RunDir>> run_dir =
      RunDir::Create(options.run_dir, options.keep_run_dir);
  if (!run_dir.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(run_dir.status().message()).c_str());
    return kExitBadInput;
  }
  run_dir_holder = std::move(*run_dir);
  cluster_options.run_dir = run_dir_holder->path();
  AddLogLevel(&cluster_options, options.log_level);
  const bool durable_coordinator = AddCoordinatorStateDir(&cluster_options);
  // The local user's own job is trusted: the servers get the roots that hold
  // its checkpoint directory and data files (client/local_roots.h).
  {
    absl::StatusOr<LocalRoots> roots = LocalRootsFor(spec, cluster_options.run_dir);
    if (!roots.ok()) return fail(FAILED, std::string(roots.status().message()), kExitBadInput);
    const std::string checkpoint_root = "--checkpoint_root=" + roots->checkpoint_root;
    cluster_options.ps_flags.push_back(checkpoint_root);
    cluster_options.coordinator_flags.push_back(checkpoint_root);
    // A mirrored job's workers checkpoint their own copies.
    if (mirrored) cluster_options.worker_flags.push_back(checkpoint_root);
    if (!roots->data_roots.empty()) {
      const std::string data_root = "--data_root=" + absl::StrJoin(roots->data_roots, ",");
      cluster_options.coordinator_flags.push_back(data_root);
      cluster_options.worker_flags.push_back(data_root);
    }
  }
  // --tls: mutual TLS between every process, psctl included, and a bearer
  // token for the job service.
  std::string token;
  if (options.tls) {
    absl::StatusOr<LocalTls> tls = MakeLocalTls(cluster_options.run_dir + "/tls");
    absl::Status s = tls.status();
    if (s.ok()) {
      TransportOptions transport;
      transport.tls = tls->files;
      s = ConfigureTransport(transport);
    }
    if (!s.ok()) {
      return fail(FAILED, absl::StrCat("--tls: ", s.message()), kExitFailed);
    }
    cluster_options.server_flags = tls->ServerFlags();
    cluster_options.coordinator_flags.push_back("--auth_tokens_file=" + tls->tokens_file);
    token = tls->token;
  }
  int signal_received = 0;
  cluster_options.interrupted = [&signal_received] {
    if (signal_received == 0) signal_received = TakePendingTerminationSignal();
    return signal_received != 0;
  };

  absl::StatusOr<std::unique_ptr<LocalCluster>> started = LocalCluster::Start(cluster_options);
  if (!started.ok()) {
    if (signal_received != 0) return fail(CANCELLED, "interrupted", kExitInterrupted);
    return fail(FAILED, absl::StrCat("local cluster did not start: ", started.status().message()),
                kExitFailed);
  }
  std::unique_ptr<LocalCluster> cluster = std::move(*started);
  result.pids = cluster->pids();
  result.metrics = cluster->metrics_addresses();
  std::string metrics_line;
  if (result.metrics) {
    metrics_line = absl::StrCat("; metrics coordinator=", result.metrics->coordinator,
                                " ps=", absl::StrJoin(result.metrics->ps, ","),
                                " worker=", absl::StrJoin(result.metrics->worker, ","));
  }
  std::fprintf(info, "psctl: cluster up: %d ps, %d workers, coordinator %s; logs in %s%s\n",
               num_ps, options.num_workers, cluster->coordinator_address().c_str(),
               cluster_options.run_dir.c_str(), metrics_line.c_str());
  std::fflush(info);

  std::shared_ptr<grpc::Channel> channel = MakeChannel(cluster->coordinator_address(), token);
  std::unique_ptr<Coordinator::Stub> stub = Coordinator::NewStub(channel);
  SubmitJobRequest submit;
  submit.set_spec_yaml(spec.yaml);
  submit.set_spec_path(options.spec_path);
  SubmitJobResponse submitted;
  absl::Status s;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, ToChrono(kRpcTimeout));
    // The coordinator is ours and up (its port file is written): a
    // connection that failed (a TLS handshake starved of CPU on a loaded
    // machine) is made again within the deadline instead of failing the run.
    // Nothing is sent before the channel is ready, so nothing is sent twice.
    ctx.set_wait_for_ready(true);
    s = FromGrpcStatus(stub->SubmitJob(&ctx, submit, &submitted));
  }
  if (!s.ok()) {
    cluster->Stop(kStopGrace);
    return fail(FAILED, absl::StrCat("SubmitJob: ", s.message()),
                ExitCodeForRpcError(s.code()) == kExitUsage ? kExitBadInput : kExitFailed);
  }
  const std::string job_id = submitted.job_id();
  result.status.set_job_id(job_id);

  ProgressPrinter printer(
      json ? stderr : stdout,
      !json && isatty(STDOUT_FILENO) ? ProgressPrinter::Mode::kBar : ProgressPrinter::Mode::kLines);
  JobWatchOptions watch_options;
  watch_options.on_status = [&printer](const JobStatusProto& st) {
    printer.Update(st, absl::Now());
  };
  watch_options.on_notice = [](const std::string& notice) {
    std::fprintf(stderr, "\npsctl: %s\n", notice.c_str());
  };
  // Without restarts a dead coordinator does not come back.
  if (options.restart) {
    watch_options.reconnect_timeout =
        options.timeout_s > 0 ? absl::Seconds(options.timeout_s) : kCoordinatorComeback;
  }
  auto watch = std::make_unique<JobWatch>(stub.get(), job_id, std::move(watch_options));

  // Supervise: signals, children that die, the time limit.
  const absl::Time start = absl::Now();
  std::vector<std::string> child_failures;
  std::string psctl_error;
  int exit_code = kExitSucceeded;
  bool cancel = false;
  while (!watch->WaitFor(absl::Milliseconds(200))) {
    if (cluster_options.interrupted()) {
      psctl_error = absl::StrCat("interrupted by signal ", signal_received);
      exit_code = kExitInterrupted;
      cancel = true;
    } else if (options.timeout_s > 0 && absl::Now() - start > absl::Seconds(options.timeout_s)) {
      psctl_error = absl::StrCat("timed out after ", options.timeout_s, " s (--timeout_s)");
      exit_code = kExitFailed;
      cancel = true;
    }
    for (const ChildEvent& event : cluster->Poll()) {
      if (event.kind == ChildEvent::Kind::kRestarted) {
        std::fprintf(stderr, "\npsctl: restarted %s (pid %d %s), now pid %d\n",
                     event.name.c_str(), static_cast<int>(event.pid), event.how.c_str(),
                     static_cast<int>(event.new_pid));
        continue;
      }
      const std::string what = absl::StrCat(event.name, " (pid ", event.pid, ") ", event.how);
      child_failures.push_back(what);
      std::fprintf(stderr, "\npsctl: %s during the job, %s; last lines of %s:\n%s\n",
                   what.c_str(), event.reason.c_str(), event.log_path.c_str(),
                   TailFile(event.log_path, kLogTailLines).c_str());
      // Nobody will answer the watch any more.
      if (event.name == "coordinator") watch->Cancel();
    }
    if (cancel) break;
  }
  if (cancel) {
    if (absl::Status c = CancelJob(stub.get(), job_id); !c.ok()) {
      std::fprintf(stderr, "psctl: CancelJob: %s\n", std::string(c.message()).c_str());
    }
    // Give the coordinator a moment to report the cancelled state.
    if (!watch->WaitFor(absl::Seconds(5))) watch->Cancel();
    watch->WaitFor(absl::InfiniteDuration());
  }
  absl::StatusOr<JobStatusProto> final_status =
      FinalStatus(stub.get(), job_id, *watch, absl::Seconds(5));
  if (!final_status.ok()) {
    // Why the watch gave up says more than the last GetJob.
    const absl::Status watch_status = watch->stream_status();
    if (!watch_status.ok() && watch_status.code() != absl::StatusCode::kCancelled) {
      final_status = watch_status;
    }
    if (!durable_coordinator && cluster->restarts().at("coordinator") > 0) {
      final_status = absl::Status(
          final_status.status().code(),
          absl::StrCat(final_status.status().message(), " (this coordinator has no --state_dir, ",
                       "so a restart forgets its jobs)"));
    }
  }
  const std::optional<JobStatusProto> last = watch->last();
  watch.reset();  // joins the watch thread: the printer is ours again
  printer.Finish();
  if (options.describe) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, ToChrono(kRpcTimeout));
    ctx.set_wait_for_ready(true);
    DescribeJobRequest request;
    request.set_job_id(job_id);
    DescribeJobResponse describe;
    grpc::Status s = stub->DescribeJob(&ctx, request, &describe);
    if (s.ok()) {
      result.describe = std::move(describe);
    } else {
      std::fprintf(stderr, "psctl: DescribeJob: %s\n", s.error_message().c_str());
    }
  }
  cluster->Stop(kStopGrace);
  result.pids = cluster->pids();  // the latest processes, all stopped now
  result.restarts = cluster->restarts();

  if (final_status.ok()) {
    result.status = *final_status;
  } else {
    if (last) result.status = *last;
    result.status.set_state(exit_code == kExitInterrupted ? CANCELLED : FAILED);
    psctl_error = absl::StrCat(psctl_error.empty() ? "" : psctl_error + "; ",
                               "lost the coordinator: ", final_status.status().message());
  }
  if (exit_code == kExitSucceeded && result.status.state() != SUCCEEDED) {
    exit_code = ExitCodeForJob(result.status);
  }
  if (exit_code == kExitInterrupted && !IsFinalState(result.status.state())) {
    result.status.set_state(CANCELLED);
  }
  std::vector<std::string> errors;
  if (!psctl_error.empty()) errors.push_back(psctl_error);
  if (!result.status.error().empty()) errors.push_back(result.status.error());
  if (exit_code != kExitSucceeded && !child_failures.empty()) {
    errors.push_back(absl::StrCat("exited during the job: ", absl::StrJoin(child_failures, ", ")));
  }
  result.status.set_error(absl::StrJoin(errors, "; "));
  return report(exit_code);
}

}  // namespace pscluster
