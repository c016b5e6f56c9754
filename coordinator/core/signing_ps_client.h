// SigningPsClient: the coordinator's PsClient for one PS (or a
// multi_worker_mirrored job's copies), which signs every control request
// with the coordinator's proof (common/control_auth.h): a MAC under the key
// of the request's job, derived from the coordinator's secret
// (common/update_lease.h, DeriveJobKey). The PS takes control requests of a
// keyed job only so signed (ps/core/job_stores.h), so only the job's
// coordinator steers it there; one coordinator can also end a stale
// namespace of any job of its own (the key depends on the job id alone), and
// never another coordinator's.
//
// Push goes through unchanged (pushes carry closures' leases, and only
// workers push). An empty secret signs nothing (in-process runs, tests).
// Thread-safe as the client it wraps.
#ifndef PSCLUSTER_COORDINATOR_CORE_SIGNING_PS_CLIENT_H_
#define PSCLUSTER_COORDINATOR_CORE_SIGNING_PS_CLIENT_H_

#include <memory>
#include <string>
#include <utility>

#include "common/control_auth.h"
#include "common/ps_client.h"
#include "common/update_lease.h"

namespace pscluster {

class SigningPsClient final : public PsClient {
 public:
  // `inner` is not owned and must outlive this client.
  SigningPsClient(PsClient* inner, std::string secret)
      : inner_(inner), secret_(std::move(secret)) {}

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override {
    return inner_->CreateVariables(Sign(request, "CreateVariables"), response);
  }
  absl::Status Pull(const PullRequest& request, PullResponse* response) override {
    return inner_->Pull(Sign(request, "Pull"), response);
  }
  absl::Status Push(const PushRequest& request, PushResponse* response) override {
    return inner_->Push(request, response);
  }
  std::unique_ptr<PendingPsCall> StartPush(const PushRequest& request,
                                           PushResponse* response) override {
    return inner_->StartPush(request, response);
  }
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override {
    // No job: the process's stats, which need no proof.
    if (request.job().empty()) return inner_->Stats(request, response);
    return inner_->Stats(Sign(request, "Stats"), response);
  }
  absl::Status Save(const SaveRequest& request, SaveResponse* response) override {
    return inner_->Save(Sign(request, "Save"), response);
  }
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response) override {
    return inner_->Restore(Sign(request, "Restore"), response);
  }
  absl::Status EndJob(const EndJobRequest& request, EndJobResponse* response) override {
    return inner_->EndJob(Sign(request, "EndJob"), response);
  }
  absl::Status PruneKeys(const PruneKeysRequest& request, PruneKeysResponse* response) override {
    return inner_->PruneKeys(Sign(request, "PruneKeys"), response);
  }

 private:
  template <typename R>
  R Sign(const R& request, const char* method) const {
    R signed_request = request;
    if (!secret_.empty()) {
      SignRequest(DeriveJobKey(secret_, request.job()), method, &signed_request);
    }
    return signed_request;
  }

  PsClient* const inner_;
  const std::string secret_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COORDINATOR_CORE_SIGNING_PS_CLIENT_H_
