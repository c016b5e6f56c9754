// WorkerCopiesPsClient: the coordinator's view of a multi_worker_mirrored job's
// variables, which every worker holds a whole copy of (served by each worker
// as a ParameterServer; worker/core/mirrored_ps_client.h). To the JobRunner
// it is the job's one PS:
// - writes go to every copy: CreateVariables (the same seeded initializers
//   give identical copies), Restore (every copy from the same checkpoint),
//   EndJob and PruneKeys (each copy answers; the first error is returned);
// - reads come from copy 0 (replica 0): Pull, Stats, and Save — one writer,
//   the same checkpoint format as a PS job's, so a checkpoint restores into
//   either kind of job.
// Copies are written one after another, in replica order. The copies are the
// ring's members: SetCopies changes them when the ring is re-formed (elastic
// workers, docs/elastic_workers.md). Thread-safe as the clients it wraps.
#ifndef PSCLUSTER_COORDINATOR_CORE_WORKER_COPIES_PS_CLIENT_H_
#define PSCLUSTER_COORDINATOR_CORE_WORKER_COPIES_PS_CLIENT_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/ps_client.h"

namespace pscluster {

class WorkerCopiesPsClient final : public PsClient {
 public:
  // `copies[i]`: worker i's copy (not owned). REQUIRES: not empty.
  explicit WorkerCopiesPsClient(std::vector<PsClient*> copies) : copies_(std::move(copies)) {}

  // The ring re-formed: `copies[i]` is replica i's copy now (not owned; each
  // must outlive this client). REQUIRES: not empty.
  void SetCopies(std::vector<PsClient*> copies) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    copies_ = std::move(copies);
  }

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override;
  absl::Status Pull(const PullRequest& request, PullResponse* response) override {
    return First()->Pull(request, response);
  }
  // Only the workers push (each to its own copy).
  absl::Status Push(const PushRequest&, PushResponse*) override {
    return absl::FailedPreconditionError(
        "a multi_worker_mirrored job's variables are updated by its workers' all-reduce");
  }
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    return First()->Stats(request, response);
  }
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override {
    return First()->Save(request, response);
  }
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response) override;
  absl::Status EndJob(const EndJobRequest& request, EndJobResponse* response) override;
  absl::Status PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response) override;

 private:
  PsClient* First() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return copies_[0];
  }
  std::vector<PsClient*> Copies() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return copies_;
  }

  mutable absl::Mutex mu_;
  std::vector<PsClient*> copies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_WORKER_COPIES_PS_CLIENT_H_
