#include "common/control_auth.h"

#include <gtest/gtest.h>

#include "protos/ps.pb.h"
#include "protos/worker.pb.h"

namespace pscluster {
namespace {

TEST(ControlAuthTest, SignedRequestChecksOnlyUnchangedUnderItsKeyAndMethod) {
  const std::string key = DeriveJobKey(RandomSecret(), "job-1");
  PruneKeysRequest prune;
  prune.set_job("job-1");
  prune.set_below_closure_id(4);
  SignRequest(key, "PruneKeys", &prune);
  EXPECT_EQ(prune.auth().mac().size(), 32u);
  EXPECT_TRUE(CheckRequest(key, "PruneKeys", prune));
  EXPECT_FALSE(CheckRequest(key, "EndJob", prune));  // another method
  EXPECT_FALSE(CheckRequest(DeriveJobKey(RandomSecret(), "job-1"), "PruneKeys", prune));
  PruneKeysRequest changed = prune;
  changed.set_below_closure_id(int64_t{1} << 62);  // the attack: a MAC of another value
  EXPECT_FALSE(CheckRequest(key, "PruneKeys", changed));
  changed = prune;
  changed.set_job("job-2");
  EXPECT_FALSE(CheckRequest(key, "PruneKeys", changed));
  PruneKeysRequest unsigned_request = prune;
  unsigned_request.clear_auth();
  EXPECT_FALSE(CheckRequest(key, "PruneKeys", unsigned_request));
}

TEST(ControlAuthTest, BytesAuthFieldAndReleaseAreLeftOutOfTheMac) {
  const std::string key = DeriveWorkerKey(DeriveJobKey(RandomSecret(), "job-1"));
  SetupJobRequest setup;
  setup.set_job_id("job-1");
  setup.set_spec_yaml("name: x\n");
  setup.set_worker_key(key);
  SignRequest(key, "SetupJob", &setup);
  const std::string held = DeriveWorkerKey(DeriveJobKey(RandomSecret(), "job-0"));
  setup.set_release(RequestMac(held, "SetupJob.release", setup));
  EXPECT_TRUE(CheckRequest(key, "SetupJob", setup));
  EXPECT_EQ(setup.release(), RequestMac(held, "SetupJob.release", setup));
  setup.set_spec_yaml("name: y\n");
  EXPECT_FALSE(CheckRequest(key, "SetupJob", setup));
}

TEST(ControlAuthTest, SerializationIsDeterministic) {
  RestoreRequest a;
  a.set_job("j");
  a.set_num_ps(2);
  a.add_files()->set_name("d/ckpt-1/ps-0.data");
  a.mutable_variables()->set_job("j");
  RestoreRequest b;
  b.ParseFromString(a.SerializeAsString());
  EXPECT_EQ(RequestMac("k", "Restore", a), RequestMac("k", "Restore", b));
}

}  // namespace
}  // namespace pscluster
