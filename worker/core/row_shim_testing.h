// TEST-ONLY: a PsClient over a real VariableStore that also answers
// PullRequest.lookups and PushRequest.sparse for DENSE variables, until
// VariableStore serves them itself (then tests use InProcessPsClient and this
// goes away).
//
// A lookup pulls the variable whole from the store and returns the rows in
// the order of the ids, duplicates included (ps.proto's contract). A sparse
// gradient is applied as a dense one that is zero outside its rows (the same
// update for SGD and Adagrad with zero-gradient rows left alone; NOT for
// Adam); a repeated id is INVALID_ARGUMENT, as ps.proto says. It counts and
// logs the requests it gets.
//
// Not thread-safe (the counters and logs are unguarded): one thread at a time.
#ifndef PSCLUSTER_WORKER_CORE_ROW_SHIM_TESTING_H_
#define PSCLUSTER_WORKER_CORE_ROW_SHIM_TESTING_H_

#include <vector>

#include "common/ps_client.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/variable_store.h"

namespace pscluster {

class RowShim : public PsClient {
 public:
  // REQUIRES: `store` outlives the shim.
  explicit RowShim(VariableStore* store) : inner_(store) {}

  int pulls = 0;
  int pushes = 0;
  std::vector<PullRequest> pull_log;
  std::vector<PushRequest> push_log;

  absl::Status CreateVariables(const CreateVariablesRequest& request,
                               CreateVariablesResponse* response) override;
  absl::Status Pull(const PullRequest& request, PullResponse* response) override;
  absl::Status Push(const PushRequest& request, PushResponse* response) override;
  absl::Status Stats(const StatsRequest& request, StatsResponse* response) override;

 private:
  InProcessPsClient inner_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_ROW_SHIM_TESTING_H_
