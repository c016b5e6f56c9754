#include "coordinator/core/worker_copies_ps_client.h"

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Calls every copy; returns copy 0's response and the first error, naming
// the replica.
template <typename Request, typename Response, typename Call>
absl::Status Everywhere(const std::vector<PsClient*>& copies, const Request& request,
                        Response* response, Call call) {
  absl::Status first;
  for (size_t i = 0; i < copies.size(); ++i) {
    Response r;
    absl::Status s = call(copies[i], request, &r);
    if (i == 0) *response = std::move(r);
    if (!s.ok() && first.ok()) {
      first = absl::Status(s.code(), absl::StrCat("replica ", i, "'s copy: ", s.message()));
    }
  }
  return first;
}

}  // namespace

absl::Status WorkerCopiesPsClient::CreateVariables(const CreateVariablesRequest& request,
                                                   CreateVariablesResponse* response) {
  return Everywhere(Copies(), request, response,
                    [](PsClient* c, const CreateVariablesRequest& q, CreateVariablesResponse* r) {
                      return c->CreateVariables(q, r);
                    });
}

absl::Status WorkerCopiesPsClient::Restore(const RestoreRequest& request,
                                           RestoreResponse* response) {
  return Everywhere(
      Copies(), request, response,
      [](PsClient* c, const RestoreRequest& q, RestoreResponse* r) { return c->Restore(q, r); });
}

absl::Status WorkerCopiesPsClient::EndJob(const EndJobRequest& request, EndJobResponse* response) {
  return Everywhere(
      Copies(), request, response,
      [](PsClient* c, const EndJobRequest& q, EndJobResponse* r) { return c->EndJob(q, r); });
}

absl::Status WorkerCopiesPsClient::PruneKeys(const PruneKeysRequest& request,
                                             PruneKeysResponse* response) {
  return Everywhere(Copies(), request, response,
                    [](PsClient* c, const PruneKeysRequest& q, PruneKeysResponse* r) {
                      return c->PruneKeys(q, r);
                    });
}

}  // namespace pscluster
