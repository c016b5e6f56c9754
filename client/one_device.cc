#include "client/one_device.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/describe.h"
#include "client/exit_codes.h"
#include "client/in_process_worker.h"
#include "client/local_roots.h"
#include "client/output_format.h"
#include "client/progress.h"
#include "client/result_json.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/worker_client.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "common/termination_signals.h"
#include "rpc/rpc_util.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/worker_state.h"

namespace pscluster {
namespace {

// The coordinator's view of a worker living in this process: direct calls
// into its WorkerState, no RPC.

}  // namespace

int RunOneDevice(const JobSpec& spec_in, const LocalRunOptions& options) {
  JobSpec spec = spec_in;
  // One device runs one closure at a time, like TF's OneDeviceStrategy.
  spec.train.closures_per_worker = 1;
  // mirrored: `devices` replicas multiply matrices at once; each gets its
  // share of the cores (OpenBLAS threads on top of replica threads only
  // fight over them: 6x slower on 2 cores).
  if (spec.devices > 1) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    SetCpuComputeThreads(std::max(1, cores / static_cast<int>(spec.devices)));
  }

  // The same PS, worker and coordinator cores as a cluster, wired in process;
  // the checkpoints confined as a cluster's (client/local_roots.h).
  VariableStore::Options store_options;
  JobRunnerOptions runner_options;
  if (!spec.checkpoint.dir.empty() || !spec.summaries.logdir.empty()) {
    absl::StatusOr<LocalRoots> roots = LocalRootsFor(spec, /*run_dir=*/"");
    if (!roots.ok()) {
      std::cerr << "psctl: " << roots.status().message() << "\n";
      return kExitUsage;
    }
    store_options.checkpoint_root = roots->checkpoint_root;
    runner_options.checkpoint_root = roots->checkpoint_root;
  }
  VariableStore store(store_options);
  InProcessPsClient ps(&store);
  WorkerState worker_state(
      [&store](const std::string&) { return std::make_unique<InProcessPsClient>(&store); });
  InProcessWorkerClient worker(&worker_state, "in-process", &spec);
  runner_options.ps_addresses = {"in-process"};
  JobRunner runner(absl::StrCat(spec.name, "-1"), spec, {&ps}, {&worker}, runner_options);

  // SIGINT/SIGTERM cancel the job; closures in flight finish first.
  bool interrupted = false;
  absl::Mutex mu;
  OnTerminationSignal([&] {
    {
      absl::MutexLock lock(&mu);
      interrupted = true;
    }
    runner.Cancel();
  });

  std::thread run([&runner] { runner.Run().IgnoreError(); });
  // -o json|yaml: the result alone on stdout, progress on stderr.
  const bool json = options.output != OutputFormat::kText;
  std::FILE* progress_out = json ? stderr : stdout;
  ProgressPrinter printer(progress_out,
                          !json && isatty(fileno(stdout)) ? ProgressPrinter::Mode::kBar
                                                          : ProgressPrinter::Mode::kLines);
  const absl::Time deadline = options.timeout_s > 0 ? absl::Now() + absl::Seconds(options.timeout_s)
                                                    : absl::InfiniteFuture();
  JobStatusProto status;
  int64_t seen = -1;
  while (true) {
    seen = runner.WaitForChange(seen, absl::Milliseconds(500), &status);
    printer.Update(status, absl::Now());
    if (IsFinalState(status.state())) break;
    if (absl::Now() > deadline) runner.Cancel();
  }
  run.join();
  printer.Finish();
  status = runner.Status();
  std::optional<DescribeJobResponse> describe;
  if (options.describe) {
    absl::StatusOr<DescribeJobResponse> d = runner.Describe();
    if (d.ok()) {
      describe = *std::move(d);
    } else {
      std::cerr << "psctl: describe: " << d.status().message() << "\n";
    }
  }

  if (json) {
    RunResult result;
    result.status = status;
    result.strategy = StrategyName(spec.strategy);
    result.ps = 0;
    result.workers = 1;
    result.describe = describe;
    PrintStructured(RunResultJson(result), options.output);
  } else {
    std::cout << FormatSummary(status);
    if (describe) std::cout << "\n" << FormatDescribe(*describe);
    std::cout << std::flush;
  }
  absl::MutexLock lock(&mu);
  if (status.state() == SUCCEEDED) return 0;
  if (interrupted) return 130;
  if (!json) std::cerr << "psctl: job failed: " << status.error() << "\n";
  return ExitCodeForJob(status);
}

}  // namespace pscluster
