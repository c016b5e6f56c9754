// JobStores: each job's variables, keys and counters are its own; EndJob
// frees them; pruned keys stay duplicates, also across a save and restore.
#include "ps/core/job_stores.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/control_auth.h"
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

// `request` signed by the job's coordinator (key) for `method`.
template <typename R>
R Signed(R request, const std::string& key, const std::string& method) {
  SignRequest(key, method, &request);
  return request;
}

// Pulls "w" of `job`; with `key`, signed by the coordinator.
std::vector<float> Read(JobStores& stores, const std::string& job, const std::string& key = "") {
  PullRequest req;
  req.set_job(job);
  req.add_names("w");
  if (!key.empty()) SignRequest(key, "Pull", &req);
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
  ASSERT_EQ(mkdir((std::string(dir) + "/ck").c_str(), 0700), 0);
  JobStores stores(options);
  CreateVariablesRequest create = OneVariable("j", 1, 0.0f);
  create.set_checkpoint_dir("ck");
  CreateVariablesResponse created;
  ASSERT_TRUE(stores.CreateVariables(create, &created).ok());
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
  save.set_name("ck/ps-0.data");
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
  rmdir((std::string(dir) + "/ck").c_str());
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
  ASSERT_TRUE(stores.CreateVariables(Signed(create, key, "CreateVariables"), &created).ok());

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
  EXPECT_THAT(Read(stores, "j-1", key), ElementsAre(0, 0, 0, 0));
  // The real pushes apply.
  EXPECT_TRUE(push(7, 0, lease7, 2).ok());
  EXPECT_TRUE(push(7, 1, lease7, 2).ok());
  EXPECT_THAT(Read(stores, "j-1", key), ElementsAre(-2, -2, -2, -2));

  // The namespace keeps its key: creating or restoring it under another is refused.
  CreateVariablesRequest other = OneVariable("j-1", 4, 0.0f);
  const std::string other_key = DeriveJobKey(RandomSecret(), "j-1");
  other.set_job_key(other_key);
  EXPECT_EQ(stores.CreateVariables(Signed(other, other_key, "CreateVariables"), &created).code(),
            absl::StatusCode::kPermissionDenied);
  // ... even signed under the held key: the key is not replaced.
  EXPECT_EQ(stores.CreateVariables(Signed(other, key, "CreateVariables"), &created).code(),
            absl::StatusCode::kPermissionDenied);
  RestoreRequest restore;
  restore.set_job("j-1");
  *restore.mutable_variables() = other;
  RestoreResponse restored;
  EXPECT_FALSE(stores.Restore(Signed(restore, other_key, "Restore"), &restored).ok());
  EXPECT_THAT(Read(stores, "j-1", key), ElementsAre(-2, -2, -2, -2));
  // Once ended (by its coordinator), the id is free for a new key.
  EndJobRequest end;
  end.set_job("j-1");
  EndJobResponse ended;
  ASSERT_TRUE(stores.EndJob(Signed(end, key, "EndJob"), &ended).ok());
  EXPECT_TRUE(ended.existed());
  EXPECT_TRUE(stores.CreateVariables(Signed(other, other_key, "CreateVariables"), &created).ok());
}

// Issue 22: only the job's coordinator steers a keyed job. Every control
// request without its MAC (or with a MAC of other values) is refused and
// changes nothing; strangers' pulls need a closure's lease.
TEST(JobStoresTest, ControlRequestsOfAKeyedJobNeedTheCoordinatorsMac) {
  char dir[] = "/tmp/job_stores_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string root = dir;
  ASSERT_EQ(mkdir((root + "/ck").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((root + "/other").c_str(), 0700), 0);
  VariableStore::Options options;
  options.checkpoint_root = root;
  JobStores stores(options);
  const std::string key = DeriveJobKey(RandomSecret(), "j");
  CreateVariablesRequest create = OneVariable("j", 4, 0.0f);
  create.set_job_key(key);
  create.set_checkpoint_dir("ck");
  CreateVariablesResponse created;
  // Unsigned, or signed under another key: refused.
  EXPECT_EQ(stores.CreateVariables(create, &created).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(stores.CreateVariables(Signed(create, "wrong", "CreateVariables"), &created).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(stores.CreateVariables(Signed(create, key, "CreateVariables"), &created).ok());
  const std::string lease = MakeLease(key, "j", 3, 2);
  auto push = [&](int64_t closure, int64_t step, const std::string& l, int64_t steps) {
    PushRequest req;
    req.set_job("j");
    NamedTensor* g = req.add_gradients();
    g->set_name("w");
    EncodeTensor({4}, std::vector<float>(4, 1.0f), g->mutable_tensor());
    req.mutable_update()->set_closure_id(closure);
    req.mutable_update()->set_step(step);
    req.mutable_update()->set_lease(l);
    req.mutable_update()->set_lease_steps(steps);
    PushResponse resp;
    return stores.Push(req, &resp);
  };
  ASSERT_TRUE(push(3, 0, lease, 2).ok());

  // PruneKeys past every closure: had it been taken, every later push would
  // be a duplicate.
  PruneKeysRequest prune;
  prune.set_job("j");
  prune.set_below_closure_id(int64_t{1} << 62);
  PruneKeysResponse pruned;
  EXPECT_EQ(stores.PruneKeys(prune, &pruned).code(), absl::StatusCode::kPermissionDenied);
  PruneKeysRequest replayed = Signed(prune, key, "PruneKeys");
  replayed.set_below_closure_id(1);  // a MAC of another value
  EXPECT_EQ(stores.PruneKeys(replayed, &pruned).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(stores.PruneKeys(Signed(prune, key, "EndJob"), &pruned).code(),
            absl::StatusCode::kPermissionDenied);  // a MAC of another method
  ASSERT_TRUE(push(3, 1, lease, 2).ok());  // not a duplicate: nothing was pruned

  EndJobRequest end;
  end.set_job("j");
  EndJobResponse ended;
  EXPECT_EQ(stores.EndJob(end, &ended).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(ended.existed());

  StatsRequest stats_request;
  stats_request.set_job("j");
  StatsResponse stats;
  EXPECT_EQ(stores.Stats(stats_request, &stats).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(stores.Stats(Signed(stats_request, key, "Stats"), &stats).ok());
  EXPECT_EQ(stats.applied_steps(), 2);
  StatsResponse process;
  ASSERT_TRUE(stores.Stats(StatsRequest(), &process).ok());  // no job: no proof needed
  EXPECT_THAT(process.jobs(), ElementsAre("j"));
  EXPECT_TRUE(process.checkpoint_root());
  EXPECT_EQ(process.variables_size(), 0);

  // Pulls: a closure's lease (an eval closure's covers 0 steps) or the MAC.
  PullRequest pull;
  pull.set_job("j");
  pull.add_names("w");
  PullResponse pulled;
  EXPECT_EQ(stores.Pull(pull, &pulled).code(), absl::StatusCode::kPermissionDenied);
  const std::string eval_lease = MakeLease(key, "j", (int64_t{1} << 62) | 5, 0);
  pull.mutable_lease()->set_closure_id((int64_t{1} << 62) | 5);
  pull.mutable_lease()->set_lease(eval_lease);
  EXPECT_TRUE(stores.Pull(pull, &pulled).ok());
  EXPECT_EQ(push((int64_t{1} << 62) | 5, 0, eval_lease, 0).code(),
            absl::StatusCode::kPermissionDenied);  // an eval lease pushes nothing
  pull.mutable_lease()->set_closure_id(6);
  EXPECT_EQ(stores.Pull(pull, &pulled).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(Read(stores, "j", key), ElementsAre(-2, -2, -2, -2));

  // Save: signed, under the job's own directory, never over a file.
  SaveRequest save;
  save.set_job("j");
  save.set_name("ck/ckpt-1/ps-0.data");
  ASSERT_EQ(mkdir((root + "/ck/ckpt-1").c_str(), 0700), 0);
  SaveResponse saved;
  EXPECT_EQ(stores.Save(save, &saved).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(stores.Save(Signed(save, key, "Save"), &saved).ok());
  EXPECT_EQ(stores.Save(Signed(save, key, "Save"), &saved).code(),
            absl::StatusCode::kAlreadyExists);
  SaveRequest elsewhere = save;
  elsewhere.set_name("other/ps-0.data");
  EXPECT_EQ(stores.Save(Signed(elsewhere, key, "Save"), &saved).code(),
            absl::StatusCode::kPermissionDenied);
  SaveRequest not_held = save;
  not_held.set_job("nobody");
  not_held.set_name("ck/ckpt-1/ps-1.data");
  EXPECT_EQ(stores.Save(not_held, &saved).code(), absl::StatusCode::kNotFound);
  EXPECT_NE(access((root + "/ck/ckpt-1/ps-1.data").c_str(), F_OK), 0);
  EXPECT_NE(access((root + "/other/ps-0.data").c_str(), F_OK), 0);

  // A job id is never empty; a keyless job is refused once a job gave a key.
  EXPECT_EQ(stores.CreateVariables(OneVariable("", 4, 0.0f), &created).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stores.CreateVariables(OneVariable("keyless", 4, 0.0f), &created).code(),
            absl::StatusCode::kPermissionDenied);

  // The quota: once the job's directory holds that many bytes, Save stops.
  stores.set_checkpoint_quota_bytes(1);
  save.set_name("ck/ckpt-1/ps-2.data");
  EXPECT_EQ(stores.Save(Signed(save, key, "Save"), &saved).code(),
            absl::StatusCode::kResourceExhausted);

  // The coordinator ends it.
  ASSERT_TRUE(stores.EndJob(Signed(end, key, "EndJob"), &ended).ok());
  EXPECT_TRUE(ended.existed());
  unlink((root + "/ck/ckpt-1/ps-0.data").c_str());
  rmdir((root + "/ck/ckpt-1").c_str());
  rmdir((root + "/ck").c_str());
  rmdir((root + "/other").c_str());
  rmdir(dir);
}

TEST(JobStoresTest, RequireJobKeysRefusesKeylessJobs) {
  JobStores stores;
  stores.RequireJobKeys();
  CreateVariablesResponse created;
  EXPECT_EQ(stores.CreateVariables(OneVariable("tool", 4, 0.0f), &created).code(),
            absl::StatusCode::kPermissionDenied);
  const std::string key = DeriveJobKey(RandomSecret(), "job");
  CreateVariablesRequest create = OneVariable("job", 4, 0.0f);
  create.set_job_key(key);
  EXPECT_TRUE(stores.CreateVariables(Signed(create, key, "CreateVariables"), &created).ok());
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
