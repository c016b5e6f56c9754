// JobStores: each job's variables, keys and counters are its own; EndJob
// frees them; pruned keys stay duplicates, also across a save and restore.
#include "ps/core/job_stores.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "common/tensor.h"
#include "common/update_lease.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

CreateVariablesRequest OneVariable(const std::string& job, int64_t size, float init) {
  CreateVariablesRequest req;
  req.set_job(job);
  VariableSpecProto* spec = req.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(size);
  spec->mutable_initializer()->set_type("constant");
  spec->mutable_initializer()->set_value(init);
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(1.0f);
  return req;
}

// Pushes gradient 1 to "w" of `job` under key (closure, step); returns
// whether it was a duplicate.
absl::StatusOr<bool> Push(JobStores& stores, const std::string& job, int64_t size, int64_t closure,
                          int64_t step) {
  PushRequest req;
  req.set_job(job);
  NamedTensor* g = req.add_gradients();
  g->set_name("w");
  EncodeTensor({size}, std::vector<float>(size, 1.0f), g->mutable_tensor());
  req.mutable_update()->set_closure_id(closure);
  req.mutable_update()->set_step(step);
  PushResponse resp;
  if (absl::Status s = stores.Push(req, &resp); !s.ok()) return s;
  return resp.duplicate();
}

std::vector<float> Read(JobStores& stores, const std::string& job) {
  PullRequest req;
  req.set_job(job);
  req.add_names("w");
  PullResponse resp;
  EXPECT_TRUE(stores.Pull(req, &resp).ok());
  if (resp.tensors_size() != 1) return {};
  absl::StatusOr<Tensor> t = DecodeTensor(resp.tensors(0).tensor());
  if (!t.ok()) return {};
  return std::vector<float>(t->values().begin(), t->values().end());
}

TEST(JobStoresTest, JobsWithTheSameNamesAndKeysDoNotShareAnything) {
  JobStores stores;
  CreateVariablesResponse created;
  ASSERT_TRUE(stores.CreateVariables(OneVariable("a-1", 2, 5.0f), &created).ok());
  // The same name with another shape and initializer: fine in another job.
  ASSERT_TRUE(stores.CreateVariables(OneVariable("b-2", 3, 0.0f), &created).ok());
  EXPECT_EQ(created.existing(), 0);

  ASSERT_EQ(*Push(stores, "a-1", 2, /*closure=*/0, /*step=*/0), false);
  // The same (closure, step) in job b is not a repeat of job a's.
  ASSERT_EQ(*Push(stores, "b-2", 3, 0, 0), false);
  ASSERT_EQ(*Push(stores, "b-2", 3, 0, 0), true);
  EXPECT_THAT(Read(stores, "a-1"), ElementsAre(4.0f, 4.0f));
  EXPECT_THAT(Read(stores, "b-2"), ElementsAre(-1.0f, -1.0f, -1.0f));

  StatsRequest sreq;
  sreq.set_job("b-2");
  StatsResponse stats;
  ASSERT_TRUE(stores.Stats(sreq, &stats).ok());
  EXPECT_EQ(stats.applied_steps(), 1);
  EXPECT_EQ(stats.duplicate_steps(), 1);
  EXPECT_THAT(stats.jobs(), ElementsAre("a-1", "b-2"));
  EXPECT_EQ(stats.held_bytes(), 5 * 4);
  EXPECT_NE(stats.incarnation(), 0u);
}

TEST(JobStoresTest, EndJobFreesTheNamespaceAndLaterCallsAreNotFound) {
  JobStores stores;
  CreateVariablesResponse created;
  ASSERT_TRUE(stores.CreateVariables(OneVariable("a-1", 1000, 1.0f), &created).ok());
  EndJobRequest end;
  end.set_job("a-1");
  EndJobResponse ended;
  ASSERT_TRUE(stores.EndJob(end, &ended).ok());
  EXPECT_TRUE(ended.existed());
  EXPECT_EQ(ended.variables(), 1);
  EXPECT_EQ(ended.bytes(), 4000);

  absl::StatusOr<bool> late = Push(stores, "a-1", 1000, 1, 0);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(late.status().message(), HasSubstr("job 'a-1'"));

  StatsResponse stats;
  ASSERT_TRUE(stores.Stats(StatsRequest(), &stats).ok());
  EXPECT_TRUE(stats.jobs().empty());
  EXPECT_EQ(stats.held_bytes(), 0);

  // Ending it again is not an error; a new job of the same id starts afresh.
  ASSERT_TRUE(stores.EndJob(end, &ended).ok());
  ASSERT_TRUE(stores.CreateVariables(OneVariable("a-1", 1000, 7.0f), &created).ok());
  EXPECT_EQ(created.existing(), 0);
  EXPECT_EQ(Read(stores, "a-1")[0], 7.0f);
}

TEST(JobStoresTest, PrunedKeysAreForgottenButStayDuplicatesAcrossSaveAndRestore) {
  char dir[] = "/tmp/job_stores_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  VariableStore::Options options;  // the same --checkpoint_root before and after
  options.checkpoint_root = dir;
  JobStores stores(options);
  CreateVariablesResponse created;
  ASSERT_TRUE(stores.CreateVariables(OneVariable("j", 1, 0.0f), &created).ok());
  for (int64_t closure = 0; closure < 10; ++closure) {
    for (int64_t step = 0; step < 5; ++step) ASSERT_FALSE(*Push(stores, "j", 1, closure, step));
  }
  PruneKeysRequest prune;
  prune.set_job("j");
  prune.set_below_closure_id(8);
  PruneKeysResponse pruned;
  ASSERT_TRUE(stores.PruneKeys(prune, &pruned).ok());
  EXPECT_EQ(pruned.pruned(), 40);
  EXPECT_EQ(pruned.remaining(), 10);
  // A late push of a retired closure is dropped, a live one's repeat too.
  EXPECT_TRUE(*Push(stores, "j", 1, 3, 2));
  EXPECT_TRUE(*Push(stores, "j", 1, 9, 4));
  EXPECT_FALSE(*Push(stores, "j", 1, 9, 5));
  EXPECT_EQ(Read(stores, "j")[0], -51.0f);

  // The watermark goes into the checkpoint and comes back with a restore,
  // into a fresh process (another JobStores).
  SaveRequest save;
  save.set_job("j");
  save.set_name("ps-0.data");
  SaveResponse saved;
  ASSERT_TRUE(stores.Save(save, &saved).ok());

  JobStores restarted(options);
  RestoreRequest restore;
  restore.set_job("j");
  restore.set_num_ps(1);
  *restore.mutable_variables() = OneVariable("j", 1, 0.0f);
  CheckpointFile* file = restore.add_files();
  file->set_name(saved.name());
  file->set_bytes(saved.bytes());
  file->set_checksum(saved.checksum());
  RestoreResponse restored;
  ASSERT_TRUE(restarted.Restore(restore, &restored).ok());
  EXPECT_EQ(Read(restarted, "j")[0], -51.0f);
  EXPECT_TRUE(*Push(restarted, "j", 1, 0, 0));  // retired before the save
  EXPECT_TRUE(*Push(restarted, "j", 1, 9, 5));  // applied before the save
  EXPECT_FALSE(*Push(restarted, "j", 1, 9, 6));
  StatsRequest sreq;
  sreq.set_job("j");
  StatsResponse stats;
  ASSERT_TRUE(restarted.Stats(sreq, &stats).ok());
  EXPECT_EQ(stats.held_keys(), 12);
  // The step counters came back with the checkpoint: 51 applied and 2
  // dropped before the save, one more of each after the restore.
  EXPECT_EQ(stats.applied_steps(), 52);
  EXPECT_EQ(stats.duplicate_steps(), 4);
  unlink((std::string(dir) + "/" + saved.name()).c_str());
  rmdir(dir);
}

// The attack of issue 12: a client pushes empty updates under keys of
// closures it was never given, so that the PS drops the real steps as
// duplicates. With a job key, only pushes with the coordinator's lease count.
TEST(JobStoresTest, PushesNeedTheirClosuresLeaseWhenTheJobHasAKey) {
  JobStores stores;
  const std::string key = DeriveJobKey(RandomSecret(), "j-1");
  CreateVariablesRequest create = OneVariable("j-1", 4, 0.0f);
  create.set_job_key(key);
  CreateVariablesResponse created;
  ASSERT_TRUE(stores.CreateVariables(create, &created).ok());

  auto push = [&](int64_t closure, int64_t step, const std::string& lease, int64_t lease_steps) {
    PushRequest req;
    req.set_job("j-1");
    NamedTensor* g = req.add_gradients();
    g->set_name("w");
    EncodeTensor({4}, std::vector<float>(4, 1.0f), g->mutable_tensor());
    req.mutable_update()->set_closure_id(closure);
    req.mutable_update()->set_step(step);
    req.mutable_update()->set_lease(lease);
    req.mutable_update()->set_lease_steps(lease_steps);
    PushResponse resp;
    return stores.Push(req, &resp);
  };
  const std::string lease7 = MakeLease(key, "j-1", 7, 2);
  // No lease, a forged one, another closure's, a step past the lease, more
  // steps than leased: all refused, nothing applied, no key recorded.
  EXPECT_EQ(push(7, 0, "", 0).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(push(7, 0, std::string(kLeaseBytes, 'x'), 2).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(push(8, 0, lease7, 2).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(push(7, 2, lease7, 2).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(push(7, 5, lease7, 9).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(push(7, 0, MakeLease(DeriveJobKey(RandomSecret(), "j-1"), "j-1", 7, 2), 2).code(),
            absl::StatusCode::kPermissionDenied);
  PushRequest unkeyed;
  unkeyed.set_job("j-1");
  PushResponse unkeyed_response;
  EXPECT_EQ(stores.Push(unkeyed, &unkeyed_response).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Read(stores, "j-1"), ElementsAre(0, 0, 0, 0));
  // The real pushes apply.
  EXPECT_TRUE(push(7, 0, lease7, 2).ok());
  EXPECT_TRUE(push(7, 1, lease7, 2).ok());
  EXPECT_THAT(Read(stores, "j-1"), ElementsAre(-2, -2, -2, -2));

  // The namespace keeps its key: creating or restoring it under another is refused.
  CreateVariablesRequest other = OneVariable("j-1", 4, 0.0f);
  other.set_job_key(DeriveJobKey(RandomSecret(), "j-1"));
  EXPECT_EQ(stores.CreateVariables(other, &created).code(), absl::StatusCode::kPermissionDenied);
  RestoreRequest restore;
  restore.set_job("j-1");
  *restore.mutable_variables() = other;
  RestoreResponse restored;
  EXPECT_EQ(stores.Restore(restore, &restored).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Read(stores, "j-1"), ElementsAre(-2, -2, -2, -2));
  // Once ended, the id is free for a new key.
  EndJobRequest end;
  end.set_job("j-1");
  EndJobResponse ended;
  ASSERT_TRUE(stores.EndJob(end, &ended).ok());
  EXPECT_TRUE(stores.CreateVariables(other, &created).ok());
}

TEST(JobStoresTest, UnknownJobIsNotFoundForReadsButEmptyForStats) {
  JobStores stores;
  PullRequest pull;
  pull.set_job("nobody");
  pull.add_names("w");
  PullResponse resp;
  EXPECT_EQ(stores.Pull(pull, &resp).code(), absl::StatusCode::kNotFound);
  StatsRequest sreq;
  sreq.set_job("nobody");
  StatsResponse stats;
  ASSERT_TRUE(stores.Stats(sreq, &stats).ok());
  EXPECT_EQ(stats.variables_size(), 0);
}

}  // namespace
}  // namespace pscluster
