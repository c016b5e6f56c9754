// evaluator: the sidecar evaluator (TF's SidecarEvaluator) of one job. Watches
// the job's checkpoint directory and evaluates each new committed checkpoint
// on the job's data.eval, in this process (evaluator/checkpoint_eval.h), with
// TensorBoard scalars, Prometheus /metrics and the best checkpoint kept
// (evaluator/core/sidecar_evaluator.h). Flag parsing and wiring only.
//
// Its task in a cluster is type `evaluator` (TF_CONFIG {"cluster": {...},
// "task": {"type": "evaluator", "index": 0}}, or --cluster FILE
// --task_type=evaluator); it serves no RPC, so the cluster is only checked.
//
// Output: one line per checkpoint on stdout ("evaluated checkpoint ID step
// STEP: loss L accuracy A ..."); logs on stderr.
// Exit codes: 0 after SIGINT/SIGTERM, or once the job ended and its last
// checkpoint was evaluated (--until_job_ends); 1 if it cannot start (the
// job's spec cannot be evaluated); 2 for invalid flags.
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "client/checkpoint_verify.h"
#include "common/checkpoint_file.h"
#include "common/cluster_config.h"
#include "common/confined_path.h"
#include "common/job_paths.h"
#include "common/termination_signals.h"
#include "coordinator/core/checkpoint_manager.h"
#include "coordinator/core/job_log.h"
#include "evaluator/checkpoint_eval.h"
#include "evaluator/core/sidecar_evaluator.h"
#include "rpc/process_metrics.h"
#include "rpc/server_flags.h"
#include "worker/core/cpu_backend.h"

ABSL_FLAG(std::string, checkpoint_root, "",
          "The checkpoint root the job's coordinator and PS use (the same storage): "
          "--checkpoint_dir and the job's summaries.logdir are confined to it. Required.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "The job's checkpoint directory (its checkpoint.dir): relative to --checkpoint_root "
          "or absolute under it. Required. The evaluator writes <dir>/evaluator/state and, "
          "with eval.keep_best, <dir>/best/.");
ABSL_FLAG(std::string, job, "",
          "The job whose spec (from <dir>/joblog) is evaluated when several jobs used the "
          "directory; default: the log's first job.");
ABSL_FLAG(std::vector<std::string>, data_root, {pscluster::kDefaultDataRoot},
          "Directories the job's data.eval files must lie under (as worker_server's "
          "--data_root). Default: /usr/share/datasets");
ABSL_FLAG(double, poll_interval_s, 5,
          "Seconds between looks at the checkpoint directory when nothing new was found.");
ABSL_FLAG(std::string, summary_dir, "",
          "Directory of the eval event files (TensorBoard). Default: <summaries.logdir>/eval "
          "of the job (confined to --checkpoint_root), none when the job has no summaries.");
ABSL_FLAG(bool, until_job_ends, false,
          "Exit (0) once the job's log records its end and its last checkpoint is evaluated. "
          "Off (default): run until SIGTERM, as a long-running sidecar.");
ABSL_FLAG(int64_t, eval_closure_examples, 2000,
          "Examples per eval closure (as the coordinator's).");
ABSL_FLAG(int, compute_threads, 0,
          "threads of the CPU backend's matrix products (OpenBLAS); 0: one per core.");

namespace pscluster {
namespace {

// Whether the job log's last start/end record is an end.
bool JobEnded(const std::string& dir) {
  absl::StatusOr<std::vector<JobLogRecord>> log = ReadJobLog(dir + "/joblog");
  if (!log.ok()) return false;
  bool ended = false;
  for (const JobLogRecord& r : *log) {
    if (r.has_started()) ended = false;
    if (r.has_ended()) ended = true;
  }
  return ended;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Evaluates each new committed checkpoint of one job (the sidecar evaluator).\n"
      "  evaluator --checkpoint_root=DIR --checkpoint_dir=JOB_DIR [--data_root=DIR,...]\n"
      "            [--metrics_address=HOST:PORT] [--poll_interval_s=S] [--until_job_ends]\n"
      "  (also --cluster=cluster.yaml --task_type=evaluator, or TF_CONFIG, task type "
      "evaluator)");
  absl::StatusOr<ServerOptions> options = ParseServerCommandLine(argc, argv);
  if (!options.ok()) {
    std::cerr << "evaluator: " << options.status().message() << "\n";
    return kExitBadFlags;
  }
  absl::StatusOr<std::optional<ClusterConfig>> cluster =
      ResolveServerCluster(TaskType::kEvaluator, std::getenv("TF_CONFIG"), &*options);
  if (!cluster.ok()) {
    std::cerr << "evaluator: " << cluster.status().message() << "\n";
    return kExitBadFlags;
  }
  auto bad_flag = [](const std::string& message) {
    std::cerr << "evaluator: " << message << "\n";
    return kExitBadFlags;
  };
  const std::string root_flag = absl::GetFlag(FLAGS_checkpoint_root);
  const std::string dir_flag = absl::GetFlag(FLAGS_checkpoint_dir);
  if (root_flag.empty()) return bad_flag("--checkpoint_root is required");
  if (dir_flag.empty()) return bad_flag("--checkpoint_dir is required (the job's checkpoint.dir)");
  const double poll_s = absl::GetFlag(FLAGS_poll_interval_s);
  if (!(poll_s > 0) || poll_s > 3600) {
    return bad_flag(absl::StrCat("--poll_interval_s must be in (0, 3600], got ", poll_s));
  }
  if (absl::GetFlag(FLAGS_eval_closure_examples) <= 0) {
    return bad_flag("--eval_closure_examples must be > 0");
  }
  const std::vector<std::string> data_roots = absl::GetFlag(FLAGS_data_root);
  if (data_roots.empty()) return bad_flag("--data_root must name at least one directory");
  absl::StatusOr<std::string> root = RealRoot(root_flag, "--checkpoint_root");
  if (!root.ok()) return bad_flag(std::string(root.status().message()));
  absl::StatusOr<CheckpointLocation> location = ResolveCheckpointDir(*root, dir_flag);
  if (!location.ok()) {
    return bad_flag(absl::StrCat("--checkpoint_dir: ", location.status().message()));
  }
  const std::string dir = location->dir;

  spdlog::set_default_logger(spdlog::stderr_color_mt("evaluator"));
  spdlog::set_level(spdlog::level::from_str(options->log_level));
  if (cluster->has_value()) {
    spdlog::info("cluster task evaluator 0 of a cluster of {} ps, {} workers",
                 (*cluster)->cluster.ps.size(), (*cluster)->cluster.worker.size());
  }
  absl::Notification stop;
  OnTerminationSignal([&stop] { stop.Notify(); });
  SetCpuComputeThreads(absl::GetFlag(FLAGS_compute_threads));

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  // Kept alive here: the exposer holds its collectables weakly.
  std::shared_ptr<ProcessMetrics> process;
  if (!options->metrics_address.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(options->metrics_address);
    } catch (const std::exception& e) {
      spdlog::error("cannot serve metrics on {}: {}", options->metrics_address, e.what());
      return 1;
    }
    exposer->RegisterCollectable(registry);
    process = std::make_shared<ProcessMetrics>();
    exposer->RegisterCollectable(process);
    const std::vector<int> ports = exposer->GetListeningPorts();
    const int port = ports.empty() ? 0 : ports.front();
    spdlog::info("metrics on port {}", port);
    if (!options->port_file.empty()) {
      if (absl::Status s =
              WriteFileAtomically(options->port_file + ".metrics", absl::StrCat(port, "\n"))
                  .status();
          !s.ok()) {
        spdlog::error("{}", s.ToString());
        return 1;
      }
    }
  }

  // The job's spec comes from its log; the evaluator may start before the job.
  const absl::Duration poll = absl::Seconds(poll_s);
  std::string job_id;
  absl::StatusOr<JobSpec> spec = absl::NotFoundError("not read yet");
  bool said = false;
  while (!stop.HasBeenNotified()) {
    spec = CheckpointJobSpec(dir, absl::GetFlag(FLAGS_job), &job_id);
    if (spec.ok() || !absl::IsNotFound(spec.status())) break;
    if (!said) {
      spdlog::info("waiting for the job's log in {}: {}", dir,
                   std::string(spec.status().message()));
    }
    said = true;
    stop.WaitForNotificationWithTimeout(poll);
  }
  if (stop.HasBeenNotified()) return 0;
  if (!spec.ok()) {
    spdlog::error("the job's spec in {}: {}", dir, spec.status().ToString());
    return 1;
  }
  if (spec->eval.mode != EvalSpec::Mode::kSidecar) {
    spdlog::warn("job {} has eval: {}, not sidecar; evaluating its checkpoints anyway", job_id,
                 EvalModeName(spec->eval.mode));
  }
  std::string summary_dir = absl::GetFlag(FLAGS_summary_dir);
  if (summary_dir.empty() && !spec->summaries.logdir.empty()) {
    absl::StatusOr<std::string> logdir = ResolveSummaryDir(*root, spec->summaries.logdir);
    if (!logdir.ok()) {
      spdlog::error("{}", logdir.status().ToString());
      return 1;
    }
    summary_dir = *logdir + "/eval";
  }
  if (summary_dir.empty()) {
    spdlog::info(
        "no TensorBoard summaries: the job has no summaries.logdir (--summary_dir sets one)");
  }

  CheckpointEval::Options eval_options;
  eval_options.checkpoint_dir = dir;
  eval_options.spec = *spec;
  eval_options.job_id = job_id;
  eval_options.data_roots = data_roots;
  eval_options.eval_closure_examples = absl::GetFlag(FLAGS_eval_closure_examples);
  absl::StatusOr<std::unique_ptr<CheckpointEval>> eval = CheckpointEval::Create(eval_options);
  if (!eval.ok()) {
    spdlog::error("job {} cannot be evaluated here: {}", job_id, eval.status().ToString());
    return 1;
  }

  SidecarEvaluator::Options o;
  o.checkpoint_dir = dir;
  o.list = [dir] { return CheckpointManager(dir, /*keep=*/1, "").List(); };
  o.evaluate = [&eval](const CheckpointManifest& m) { return (*eval)->Evaluate(m); };
  o.eval = spec->eval;
  o.summary_dir = summary_dir;
  o.registry = registry;
  o.sleep = [&stop](absl::Duration d) { stop.WaitForNotificationWithTimeout(d); };
  o.poll_interval = poll;
  o.on_poll = [](const SidecarPollResult& r) {
    std::string line;
    if (r.outcome == SidecarOutcome::kEvaluated) {
      line = absl::StrFormat("evaluated checkpoint %d step %d: loss %.6f accuracy %.6f",
                             r.checkpoint_id, r.step, r.metrics.loss, r.metrics.accuracy);
      if (r.metrics.has_auc) absl::StrAppendFormat(&line, " auc %.6f", r.metrics.auc);
      absl::StrAppendFormat(&line, " examples %d", r.metrics.examples);
      if (r.passed_over > 0) absl::StrAppendFormat(&line, " (passed over %d older)", r.passed_over);
      if (r.new_best) line += " [new best]";
      if (!r.problem.empty()) absl::StrAppend(&line, " (", r.problem, ")");
    } else {
      line = absl::StrFormat("skipped checkpoint %d (%s): %s", r.checkpoint_id,
                             OutcomeName(r.outcome), r.problem);
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  absl::StatusOr<std::unique_ptr<SidecarEvaluator>> evaluator = SidecarEvaluator::Create(o);
  if (!evaluator.ok()) {
    spdlog::error("{}", evaluator.status().ToString());
    return 1;
  }
  const EvaluatorState& start = (*evaluator)->state();
  spdlog::info("evaluating job {} in {} (last evaluated checkpoint: {}, keep_best: {})", job_id,
               dir, start.last_evaluated,
               spec->eval.keep_best ? absl::StrCat(EvalMetricName(spec->eval.metric), " ",
                                                   spec->eval.maximize ? "max" : "min")
                                    : std::string("off"));
  std::printf("evaluator watching %s (resuming after checkpoint %lld)\n", dir.c_str(),
              static_cast<long long>(start.last_evaluated));
  std::fflush(stdout);

  const bool until_end = absl::GetFlag(FLAGS_until_job_ends);
  SidecarEvaluator* e = evaluator->get();
  absl::Status run = e->Run([&] { return stop.HasBeenNotified() || (until_end && JobEnded(dir)); });
  if (!run.ok()) {
    spdlog::error("{}", run.ToString());
    return 1;
  }
  spdlog::info("stopped after {} evaluation(s) in all; last evaluated checkpoint {}",
               e->state().evaluations, e->state().last_evaluated);
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
