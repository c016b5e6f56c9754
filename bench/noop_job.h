// The job dispatch_bench and scale_bench set up on their workers to time
// NOOP closures (the worker checks the job and answers; no data, no PS),
// one worker task as worker_server wires it, minus the process, and the
// client wrapper that stamps each closure's send time.
// Benchmark code.
#ifndef PSCLUSTER_BENCH_NOOP_JOB_H_
#define PSCLUSTER_BENCH_NOOP_JOB_H_

#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/core/worker_client.h"
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

// Records when each closure went out, for the latency of its result: the
// closure's id indexes `sent_ns`, written as the call starts and read as it
// finishes, by the one taker running it. Everything else goes to `inner` unchanged.
class StampingClient final : public WorkerClient {
 public:
  StampingClient(WorkerClient* inner, std::vector<int64_t>* sent_ns)
      : inner_(inner), sent_(sent_ns) {}
  std::string address() const override { return inner_->address(); }
  absl::Status SetupJob(const SetupJobRequest& r, SetupJobResponse* out) override {
    return inner_->SetupJob(r, out);
  }
  absl::Status RunClosure(const RunClosureRequest& r, absl::Duration timeout,
                          RunClosureResponse* out) override {
    (*sent_)[r.closure_id()] = absl::GetCurrentTimeNanos();
    return inner_->RunClosure(r, timeout, out);
  }
  absl::Status RunClosures(const RunClosuresRequest& r, absl::Duration timeout,
                           RunClosuresResponse* out) override {
    const int64_t now = absl::GetCurrentTimeNanos();
    for (const RunClosureRequest& c : r.closures()) (*sent_)[c.closure_id()] = now;
    return inner_->RunClosures(r, timeout, out);
  }
  void RunClosureAsync(RunClosureRequest r, absl::Duration timeout, RunClosureDone done) override {
    (*sent_)[r.closure_id()] = absl::GetCurrentTimeNanos();
    inner_->RunClosureAsync(std::move(r), timeout, std::move(done));
  }
  void RunClosuresAsync(RunClosuresRequest r, absl::Duration timeout,
                        RunClosuresDone done) override {
    const int64_t now = absl::GetCurrentTimeNanos();
    for (const RunClosureRequest& c : r.closures()) (*sent_)[c.closure_id()] = now;
    inner_->RunClosuresAsync(std::move(r), timeout, std::move(done));
  }
  void CancelCalls() override { inner_->CancelCalls(); }
  absl::Status Ping(const PingRequest& r, PingResponse* out) override {
    return inner_->Ping(r, out);
  }

 private:
  WorkerClient* inner_;
  std::vector<int64_t>* sent_;
};

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_NOOP_JOB_H_
