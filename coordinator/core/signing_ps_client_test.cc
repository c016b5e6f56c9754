// SigningPsClient against a real JobStores: the coordinator's signed control
// requests are taken, the same requests unsigned (a stranger's) are not, and
// a coordinator can end a stale namespace of its own jobs only.
#include "coordinator/core/signing_ps_client.h"

#include <gtest/gtest.h>

#include "common/update_lease.h"
#include "ps/core/in_process_ps_client.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace {

CreateVariablesRequest OneVariable(const std::string& job, const std::string& key) {
  CreateVariablesRequest req;
  req.set_job(job);
  req.set_job_key(key);
  VariableSpecProto* spec = req.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(4);
  spec->mutable_initializer()->set_type("zeros");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(1.0f);
  return req;
}

TEST(SigningPsClientTest, SignedControlRequestsAreTakenUnsignedOnesRefused) {
  JobStores stores;
  InProcessPsClient raw(&stores);
  const std::string secret = RandomSecret();
  SigningPsClient coordinator(&raw, secret);
  CreateVariablesResponse created;
  const CreateVariablesRequest create = OneVariable("job-1", DeriveJobKey(secret, "job-1"));
  EXPECT_EQ(raw.CreateVariables(create, &created).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(coordinator.CreateVariables(create, &created).ok());

  PruneKeysRequest prune;
  prune.set_job("job-1");
  prune.set_below_closure_id(int64_t{1} << 62);
  PruneKeysResponse pruned;
  EXPECT_EQ(raw.PruneKeys(prune, &pruned).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(coordinator.PruneKeys(prune, &pruned).ok());

  StatsRequest stats_request;
  stats_request.set_job("job-1");
  StatsResponse stats;
  EXPECT_EQ(raw.Stats(stats_request, &stats).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(coordinator.Stats(stats_request, &stats).ok());
  EXPECT_EQ(stats.variables_size(), 1);

  PullRequest pull;
  pull.set_job("job-1");
  pull.add_names("w");
  PullResponse pulled;
  EXPECT_EQ(raw.Pull(pull, &pulled).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(coordinator.Pull(pull, &pulled).ok());

  // Another coordinator (another secret) cannot end this coordinator's job;
  // this one can, also as a stale namespace of a later job of its own.
  SigningPsClient other(&raw, RandomSecret());
  EndJobRequest end;
  end.set_job("job-1");
  EndJobResponse ended;
  EXPECT_EQ(other.EndJob(end, &ended).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(raw.EndJob(end, &ended).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(coordinator.EndJob(end, &ended).ok());
  EXPECT_TRUE(ended.existed());
}

}  // namespace
}  // namespace pscluster
