#include "client/psctl_remote.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(FormatJobTableTest, QueuedJobsShowTheirQueuePosition) {
  ListJobsResponse jobs;
  JobStatusProto* running = jobs.add_jobs();
  running->set_job_id("job-1");
  running->set_state(RUNNING);
  running->set_queue_position(7);  // meaningless unless QUEUED
  JobStatusProto* queued = jobs.add_jobs();
  queued->set_job_id("job-2");
  queued->set_state(QUEUED);
  queued->set_queue_position(1);
  const std::string table = FormatJobTable(jobs);
  EXPECT_THAT(table, HasSubstr("QUEUE"));
  EXPECT_THAT(table, MatchesRegex("(.|\n)*job-1 +RUNNING +- (.|\n)*"));
  EXPECT_THAT(table, MatchesRegex("(.|\n)*job-2 +QUEUED +1 (.|\n)*"));
}

TEST(FormatJobEventsTest, OneRowPerEventInUtc) {
  GetJobEventsResponse events;
  JobEvent* e = events.add_events();
  e->set_unix_seconds(0.25);
  e->set_kind("queued");
  e->set_message("position 0");
  const std::string text = FormatJobEvents(events);
  EXPECT_THAT(text, HasSubstr("1970-01-01T00:00:00.250Z"));
  EXPECT_THAT(text, HasSubstr("queued"));
  EXPECT_THAT(text, HasSubstr("position 0"));
}

}  // namespace
}  // namespace pscluster
