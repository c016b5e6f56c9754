#include "coordinator/core/job_log.h"

#include <fstream>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

JobLogRecord Finished(int64_t split) {
  JobLogRecord r;
  r.mutable_closure_finished()->set_epoch(1);
  r.mutable_closure_finished()->set_split(split);
  return r;
}

TEST(JobLogTest, AppendAndReplayInOrder) {
  const std::string path = TmpPath("a/joblog");
  {
    auto log = JobLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    JobLogRecord start;
    start.mutable_started()->set_job_id("j-1");
    ASSERT_TRUE((*log)->Append(start).ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*log)->Append(Finished(i)).ok());
  }
  {
    // Reopening appends after what is there.
    auto log = JobLog::Open(path);
    ASSERT_TRUE((*log)->Append(Finished(5)).ok());
  }
  auto records = ReadJobLog(path);
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 7u);
  EXPECT_EQ((*records)[0].started().job_id(), "j-1");
  EXPECT_EQ((*records)[6].closure_finished().split(), 5);
}

TEST(JobLogTest, TornOrCorruptTailIsDropped) {
  const std::string path = TmpPath("b/joblog");
  {
    auto log = JobLog::Open(path);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*log)->Append(Finished(i)).ok());
  }
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Every truncation point yields a prefix of whole records.
  for (size_t cut = 0; cut < data.size(); ++cut) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), cut);
    auto records = ReadJobLog(path);
    ASSERT_TRUE(records.ok());
    for (size_t i = 0; i < records->size(); ++i) EXPECT_EQ((*records)[i].closure_finished().split(), i);
  }
  // A flipped byte in the last record drops it, keeps the others.
  std::string bad = data;
  bad[bad.size() - 1] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bad.data(), bad.size());
  auto records = ReadJobLog(path);
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), 2u);
}

TEST(JobLogTest, MissingLogIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(ReadJobLog(TmpPath("none/joblog")).status()));
}

TEST(JobLogTest, WriteFileDurablyReplacesAtomically) {
  const std::string path = TmpPath("manifest");
  ASSERT_TRUE(WriteFileDurably(path, "one").ok());
  ASSERT_TRUE(WriteFileDurably(path, "two").ok());
  std::ifstream in(path);
  std::string got((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(got, "two");
}

}  // namespace
}  // namespace pscluster
