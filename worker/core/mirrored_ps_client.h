// MirroredPsClient: a multi_worker_mirrored worker's "PS" — its own full
// copy of the job's variables and optimizer state (a JobStores in the worker
// process, which the coordinator also reaches over the ParameterServer RPCs
// served by the worker: it creates, checkpoints from replica 0, and restores
// every copy), with pushes all-reduced over the ring of workers first.
//
// A push must be a synchronous share (UpdateKey.sync: replica r of R, over
// n examples). Push then
//   1. fuses the dense gradients, each scaled by n, into one buffer, plus n
//      and a "has rows" flag, and all-reduces it (collective.h) bucket by
//      bucket (`bucket_elements` floats each);
//   2. when any replica has embedding rows, all-gathers every replica's
//      rows (ids and n-scaled rows) and sums them by id in replica order;
//   3. divides by the total examples N and applies the result to the local
//      copy under the step's update key, answering the fused pull from it.
// Every replica computes bitwise the same update from the same state, so the
// copies stay identical without any parameter traffic. A replica that fails
// mid-step leaves the others waiting until `collective_timeout` (ABORTED);
// the coordinator then rolls every copy back to the last checkpoint
// (coordinator/core/job_runner.h).
//
// Everything else (pulls, stats, checkpoints) goes to the local copy.
// Thread-safe.
#ifndef PSCLUSTER_WORKER_CORE_MIRRORED_PS_CLIENT_H_
#define PSCLUSTER_WORKER_CORE_MIRRORED_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/ps_client.h"
#include "worker/core/collective.h"

namespace pscluster {

class MirroredPsClient final : public PsClient {
 public:
  struct Options {
    std::string job_id;
    absl::Duration collective_timeout = absl::Seconds(30);
    int64_t bucket_elements = int64_t{1} << 20;  // 4 MiB of float32
  };

  // `local`: this worker's copy (owned). `mailbox` (not owned) and `peers`
  // (shared: the worker's channels to the ring) must outlive this client.
  MirroredPsClient(std::unique_ptr<PsClient> local, CollectiveMailbox* mailbox,
                   std::shared_ptr<CollectivePeers> peers, Options options);

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override {
    return local_->CreateVariables(request, response);
  }
  absl::Status Pull(const PullRequest& request, PullResponse* response) override {
    return local_->Pull(request, response);
  }
  // INVALID_ARGUMENT for a push that is not a synchronous share; the
  // collective's errors (ABORTED, UNAVAILABLE, INTERNAL); the local apply's.
  absl::Status Push(const PushRequest& request, PushResponse* response) override;
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    return local_->Stats(request, response);
  }
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override {
    return local_->Save(request, response);
  }
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response) override {
    return local_->Restore(request, response);
  }
  absl::Status EndJob(const EndJobRequest& request, EndJobResponse* response) override {
    return local_->EndJob(request, response);
  }
  absl::Status PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response) override {
    return local_->PruneKeys(request, response);
  }

 private:
  const std::unique_ptr<PsClient> local_;
  CollectiveMailbox* const mailbox_;
  const std::shared_ptr<CollectivePeers> peers_;
  const Options options_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_MIRRORED_PS_CLIENT_H_
