#include "coordinator/core/job_status_board.h"

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

// A clock the test moves by hand.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1000);
  std::function<absl::Time()> Fn() {
    return [this] { return now; };
  }
};

JobStatusProto Queued() {
  JobStatusProto s;
  s.set_job_id("j");
  s.set_state(QUEUED);
  return s;
}

std::string LogPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir + "/joblog";
}

TEST(JobStatusBoardTest, WallTimeCountsFromStartUntilTheEnd) {
  FakeClock clock;
  JobStatusBoard board("j", Queued(), clock.Fn());
  clock.now += absl::Seconds(5);  // queued: not the job's time
  board.Start();
  clock.now += absl::Seconds(3);
  EXPECT_DOUBLE_EQ(board.Status().wall_seconds(), 3);
  const JobStatusProto final_status =
      board.End([](JobStatusProto* s) { s->set_state(SUCCEEDED); });
  EXPECT_EQ(final_status.state(), SUCCEEDED);
  EXPECT_DOUBLE_EQ(final_status.wall_seconds(), 3);
  clock.now += absl::Seconds(100);
  EXPECT_DOUBLE_EQ(board.Status().wall_seconds(), 3);
}

TEST(JobStatusBoardTest, WaitForChangeSeesEachUpdateButNotTheEnd) {
  JobStatusBoard board("j", Queued());
  JobStatusProto out;
  const int64_t v0 = board.WaitForChange(-1, absl::ZeroDuration(), &out);
  board.Update([](JobStatusProto* s) { s->set_steps(7); });
  const int64_t v1 = board.WaitForChange(v0, absl::ZeroDuration(), &out);
  EXPECT_GT(v1, v0);
  EXPECT_EQ(out.steps(), 7);
  // End() changes the status without waking waiters: the caller logs the
  // end first, then publishes it with an Update.
  board.End([](JobStatusProto* s) { s->set_state(FAILED); });
  EXPECT_EQ(board.WaitForChange(v1, absl::ZeroDuration(), &out), v1);
  board.Update([](JobStatusProto*) {});
  EXPECT_GT(board.WaitForChange(v1, absl::ZeroDuration(), &out), v1);
  EXPECT_EQ(out.state(), FAILED);
}

TEST(JobStatusBoardTest, WaitForChangeWakesOnAnUpdateFromAnotherThread) {
  JobStatusBoard board("j", Queued());
  JobStatusProto out;
  const int64_t v0 = board.WaitForChange(-1, absl::ZeroDuration(), &out);
  std::thread updater([&] { board.Update([](JobStatusProto* s) { s->set_epoch(2); }); });
  const int64_t v1 = board.WaitForChange(v0, absl::Hours(1), &out);
  updater.join();
  EXPECT_GT(v1, v0);
  EXPECT_EQ(out.epoch(), 2);
}

TEST(JobStatusBoardTest, EventsBeforeTheLogOpensAreAppendedWithTheNext) {
  FakeClock clock;
  JobStatusBoard board("j", Queued(), clock.Fn());
  board.Event("queued", "queued; runs next");
  board.Event("started", "running");
  const std::string path = LogPath("board_events");
  absl::StatusOr<std::unique_ptr<JobLog>> log = JobLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  board.AttachLog(*std::move(log));
  EXPECT_TRUE(board.has_log());
  ASSERT_TRUE(ReadJobLog(path).ok());
  EXPECT_TRUE(ReadJobLog(path)->empty());  // nothing until the next event
  board.Event("setup", "planned");
  absl::StatusOr<std::vector<JobLogRecord>> records = ReadJobLog(path);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].event().kind(), "queued");
  EXPECT_EQ((*records)[1].event().kind(), "started");
  EXPECT_EQ((*records)[2].event().kind(), "setup");
  EXPECT_DOUBLE_EQ((*records)[2].event().unix_seconds(), 1000);
  const std::vector<JobEvent> events = board.Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].message(), "planned");
}

TEST(JobStatusBoardTest, LogWithoutAJobLogDoesNothing) {
  JobStatusBoard board("j", Queued());
  EXPECT_FALSE(board.has_log());
  JobLogRecord rec;
  rec.mutable_started()->set_job_id("j");
  board.Log(rec);  // no log: nothing to do, nothing to fail
  board.Event("started", "running");
  EXPECT_EQ(board.Events().size(), 1u);
}

TEST(JobStatusBoardTest, ReadSeesTheStatusWithoutChangingTheVersion) {
  JobStatusBoard board("j", Queued());
  board.Update([](JobStatusProto* s) { s->set_steps(3); });
  JobStatusProto out;
  const int64_t v = board.WaitForChange(-1, absl::ZeroDuration(), &out);
  int64_t steps = 0;
  board.Read([&](const JobStatusProto& s) { steps = s.steps(); });
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(board.WaitForChange(v, absl::ZeroDuration(), &out), v);
}

}  // namespace
}  // namespace pscluster
