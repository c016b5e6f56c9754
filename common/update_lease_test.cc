#include "common/update_lease.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace pscluster {
namespace {

TEST(UpdateLeaseTest, LeaseChecksOnlyForItsJobClosureAndSteps) {
  const std::string key = DeriveJobKey(RandomSecret(), "job-1");
  const std::string lease = MakeLease(key, "job-1", 42, 8);
  ASSERT_EQ(lease.size(), kLeaseBytes);
  EXPECT_TRUE(CheckLease(key, "job-1", 42, 8, lease));
  EXPECT_FALSE(CheckLease(key, "job-1", 43, 8, lease));  // another closure
  EXPECT_FALSE(CheckLease(key, "job-1", 42, 9, lease));  // more steps
  EXPECT_FALSE(CheckLease(key, "job-2", 42, 8, lease));  // another job
  EXPECT_FALSE(CheckLease(DeriveJobKey(RandomSecret(), "job-1"), "job-1", 42, 8, lease));
  EXPECT_FALSE(CheckLease(key, "job-1", 42, 8, ""));
  std::string flipped = lease;
  flipped[3] ^= 1;
  EXPECT_FALSE(CheckLease(key, "job-1", 42, 8, flipped));
}

TEST(UpdateLeaseTest, JobKeysDependOnSecretAndJob) {
  const std::string secret = RandomSecret();
  EXPECT_EQ(secret.size(), kJobKeyBytes);
  EXPECT_NE(secret, RandomSecret());
  EXPECT_EQ(DeriveJobKey(secret, "a-1"), DeriveJobKey(secret, "a-1"));
  EXPECT_NE(DeriveJobKey(secret, "a-1"), DeriveJobKey(secret, "a-2"));
}

TEST(UpdateLeaseTest, SecretFileIsCreatedPrivateAndReadBack) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/secret";
  absl::StatusOr<std::string> first = LoadOrCreateSecret(path);
  ASSERT_TRUE(first.ok()) << first.status();
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  absl::StatusOr<std::string> again = LoadOrCreateSecret(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*first, *again);
  std::ofstream(path, std::ios::trunc) << "short";
  EXPECT_EQ(LoadOrCreateSecret(path).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
