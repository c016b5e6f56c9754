// What the sync-equivalence tests (sync_equivalence_test,
// elastic_sync_equivalence_test) share: the data, a PS whose variables stay
// after the job ends so the test can read them, and the weights' distance.
#ifndef PSCLUSTER_TESTS_SYNC_EQUIVALENCE_UTIL_H_
#define PSCLUSTER_TESTS_SYNC_EQUIVALENCE_UTIL_H_

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "common/ps_client.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace sync_equivalence {

inline constexpr char kImages[] = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
inline constexpr char kLabels[] = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

// The job's variables stay on the PS after it ends, to be read.
class KeepAfterEnd final : public PsClient {
 public:
  explicit KeepAfterEnd(JobStores* jobs) : ps_(jobs) {}
  absl::Status CreateVariables(const CreateVariablesRequest& q,
                               CreateVariablesResponse* r) override {
    return ps_.CreateVariables(q, r);
  }
  absl::Status Pull(const PullRequest& q, PullResponse* r) override { return ps_.Pull(q, r); }
  absl::Status Push(const PushRequest& q, PushResponse* r) override { return ps_.Push(q, r); }
  absl::Status Stats(const StatsRequest& q, StatsResponse* r) override { return ps_.Stats(q, r); }
  absl::Status Save(const SaveRequest& q, SaveResponse* r) override { return ps_.Save(q, r); }
  absl::Status Restore(const RestoreRequest& q, RestoreResponse* r) override {
    return ps_.Restore(q, r);
  }
  absl::Status EndJob(const EndJobRequest&, EndJobResponse*) override { return absl::OkStatus(); }
  absl::Status PruneKeys(const PruneKeysRequest& q, PruneKeysResponse* r) override {
    return ps_.PruneKeys(q, r);
  }

 private:
  InProcessPsClient ps_;
};

// ||a - b|| / ||b|| over the whole variable.
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

}  // namespace sync_equivalence
}  // namespace pscluster

#endif  // PSCLUSTER_TESTS_SYNC_EQUIVALENCE_UTIL_H_
