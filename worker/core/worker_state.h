// WorkerState: the job a worker serves, behind the Worker RPCs.
//
// SetupJob builds a Trainer for a job (model, data, PS connections);
// RunClosure runs closures on it. Re-sending SetupJob for the job that is
// already set up is a no-op, so a coordinator can always set up a worker that
// it reconnects to. Thread-safe; closures run concurrently.
//
// Only the job's coordinator steers it (issue 22): a job set up with a
// worker key (SetupJobRequest.worker_key) holds the worker. Its closures
// are run only with their MAC under that key, and another SetupJob replaces
// it only with the held job's release MAC (its coordinator lets it go), or
// once no request signed under the key has come for `hold_timeout` (its
// coordinator is gone). Otherwise PERMISSION_DENIED naming the held job.
#ifndef PSCLUSTER_WORKER_CORE_WORKER_STATE_H_
#define PSCLUSTER_WORKER_CORE_WORKER_STATE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/ps_client.h"
#include "protos/worker.pb.h"
#include "worker/core/function_job.h"
#include "worker/core/function_registry.h"
#include "worker/core/trainer.h"

namespace pscluster {

class WorkerState {
 public:
  // Makes a client for the PS task at `address`.
  using PsClientFactory = std::function<std::unique_ptr<PsClient>(const std::string& address)>;

  // `data_roots`: the directories a job's data files must lie under
  // (worker_server's --data_root; common/job_paths.h), checked before any
  // file is opened; nullopt: any file (in-process runs of the local user's
  // own job).
  explicit WorkerState(PsClientFactory ps_client_factory,
                       std::optional<std::vector<std::string>> data_roots = std::nullopt);

  // How long a keyed job holds the worker after its coordinator's last
  // signed request (worker_server --job_hold_timeout_s), and the clock it is
  // measured with (tests inject one). Call before serving.
  void set_hold_timeout(absl::Duration timeout) { hold_timeout_ = timeout; }
  void set_clock(std::function<absl::Time()> now) { now_ = std::move(now); }

  // Makes a multi_worker_mirrored job's PS client: this worker's own copy of
  // the variables behind a ring all-reduce (mirrored_ps_client.h).
  using MirrorFactory =
      std::function<absl::StatusOr<std::unique_ptr<PsClient>>(const SetupJobRequest& request)>;
  // Without one, SetupJob of a multi_worker_mirrored job is FAILED_PRECONDITION.
  void set_mirror_factory(MirrorFactory factory) { mirror_factory_ = std::move(factory); }
  // The functions this worker runs for program jobs (SetupJobRequest.program;
  // function_job.h); not owned, outlives the state. Without one, SetupJob of
  // a program job is FAILED_PRECONDITION. Call before serving.
  void set_function_runner(FunctionRunner* runner) { function_runner_ = runner; }

  // INVALID_ARGUMENT for a bad spec (its message names file:line:column) or
  // a data file outside the data roots (naming the field, the path and
  // --data_root), plus Trainer::Create's errors (which never quote a data
  // file's contents).
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same, for a worker in the coordinator's process
  // (client/in_process_worker.h): `parsed` is the job's spec as its caller
  // parsed and resolved it (the spec is parsed once per process), used
  // instead of parsing request.spec_yaml again when it is that YAML resolved
  // for request.replicas; otherwise the request's YAML is parsed as above.
  absl::Status SetupJob(const SetupJobRequest& request, SetupJobResponse* response,
                        const JobSpec* parsed) ABSL_LOCKS_EXCLUDED(mu_);
  // FAILED_PRECONDITION if `request.job_id` is not the job set up here (NOOP
  // closures too), plus Trainer::RunClosure's errors.
  absl::Status RunClosure(const RunClosureRequest& request, RunClosureResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `request.closures` one after another, each as RunClosure would, and
  // answers each in `response->results` (same order, its own status). Always
  // returns OK: errors are per closure.
  absl::Status RunClosures(const RunClosuresRequest& request, RunClosuresResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Ping(const PingRequest& request, PingResponse* response) ABSL_LOCKS_EXCLUDED(mu_);
  // The held job's coordinator lets the worker go: PERMISSION_DENIED unless
  // the request's MAC checks under the held job's worker key.
  absl::Status ReleaseJob(const ReleaseJobRequest& request, ReleaseJobResponse* response)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  PsClientFactory ps_client_factory_;
  MirrorFactory mirror_factory_;
  const std::optional<std::vector<std::string>> data_roots_;
  absl::Mutex setup_mu_;  // serialises SetupJob calls; held while data loads
  absl::Mutex mu_;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  std::string setup_fingerprint_ ABSL_GUARDED_BY(mu_);
  SetupJobResponse setup_response_ ABSL_GUARDED_BY(mu_);
  // The job set up: a YAML job's trainer, or a program job's functions.
  std::shared_ptr<Trainer> trainer_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<FunctionJob> function_job_ ABSL_GUARDED_BY(mu_);
  FunctionRunner* function_runner_ = nullptr;
  // The held job's worker key (empty: a keyless job, held by nobody) and
  // when its coordinator last proved itself.
  std::string worker_key_ ABSL_GUARDED_BY(mu_);
  absl::Time last_proof_ ABSL_GUARDED_BY(mu_);
  absl::Duration hold_timeout_ = absl::Minutes(10);
  std::function<absl::Time()> now_ = [] { return absl::Now(); };

  // OK if `request` may replace the job held now. REQUIRES: mu_ held.
  absl::Status CheckSwitch(const SetupJobRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasJob() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return trainer_ != nullptr || function_job_ != nullptr;
  }
  // SetupJob of a program job. REQUIRES: setup_mu_ held.
  absl::Status SetupProgram(const SetupJobRequest& request, SetupJobResponse* response,
                            const std::string& fingerprint) ABSL_LOCKS_EXCLUDED(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_WORKER_STATE_H_
