// The job dispatch_bench and scale_bench set up on their workers to time
// NOOP closures (the worker checks the job and answers; no data, no PS),
// and one worker task as worker_server wires it, minus the process.
// Benchmark code.
#ifndef PSCLUSTER_BENCH_NOOP_JOB_H_
#define PSCLUSTER_BENCH_NOOP_JOB_H_

#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "protos/worker.pb.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"
#include "rpc/rpc_util.h"
#include "worker/core/worker_state.h"
#include "worker/service/worker_service.h"

namespace pscluster {
namespace bench {

// SetupJob for `job_id`: the smallest job a worker sets up (synthetic data,
// nothing on disk; NOOP closures never read it), its variables placed on one
// in-process PS.
absl::StatusOr<SetupJobRequest> NoopSetupJob(const std::string& job_id);

// A worker core behind its own gRPC server on 127.0.0.1:0.
struct InProcessWorker {
  VariableStore store;  // never reached by NOOP closures
  WorkerState state{
      [this](const std::string&) { return std::make_unique<InProcessPsClient>(&store); }};
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  WorkerService service{&state, registry};
  std::unique_ptr<RunningServer> server;

  // Starts `server`; its error otherwise.
  absl::Status Start();
};

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_NOOP_JOB_H_
