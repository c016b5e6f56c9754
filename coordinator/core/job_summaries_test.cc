#include "coordinator/core/job_summaries.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protos/tensorboard_event.pb.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  std::filesystem::remove_all(path);
  return path;
}

// The summaries of an event file (its version record left out); framing and
// CRCs are common/event_file_writer_test's.
std::vector<tensorflow::Event> ReadSummaries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  std::vector<tensorflow::Event> events;
  size_t at = 0;
  while (at + kTfRecordOverheadBytes <= bytes.size()) {
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) {
      length |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
    }
    tensorflow::Event event;
    EXPECT_TRUE(event.ParseFromString(bytes.substr(at + 12, length)));
    if (event.has_summary()) events.push_back(event);
    at += kTfRecordOverheadBytes + length;
  }
  EXPECT_EQ(at, bytes.size());
  return events;
}

std::map<std::string, float> Values(const tensorflow::Event& event) {
  std::map<std::string, float> out;
  for (const auto& v : event.summary().value()) {
    EXPECT_TRUE(v.has_simple_value()) << v.tag();  // a 0 too: TensorBoard drops a bare tag
    out[v.tag()] = v.simple_value();
  }
  return out;
}

JobSummaries::Options TestOptions(const std::string& name, int64_t every_steps) {
  JobSummaries::Options o;
  o.logdir = TempDir(name);
  o.every_steps = every_steps;
  o.optimizer.set_type("sgd");
  o.optimizer.set_learning_rate(0.25f);
  o.now = [] { return absl::FromUnixSeconds(1700000000); };
  return o;
}

TEST(JobSummariesTest, TrainLossEveryStepsIsTheMeanSinceThePreviousPoint) {
  auto summaries = JobSummaries::Create(TestOptions("every", 10));
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  // Closures of 4 steps and 100 examples: points at steps 12 and 20.
  const double losses[] = {1.0, 0.8, 0.6, 0.5, 0.3};
  for (int c = 0; c < 5; ++c) (*summaries)->TrainClosure(4 * (c + 1), 100, 100 * losses[c], 50.0);
  const std::vector<tensorflow::Event> events = ReadSummaries((*summaries)->path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].step(), 12);
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1700000000.0);
  EXPECT_THAT(Values(events[0]),
              UnorderedElementsAre(Pair("train/loss", 0.8f), Pair("train/learning_rate", 0.25f),
                                   Pair("train/examples_per_sec", 50.0f)));
  EXPECT_EQ(events[1].step(), 20);
  EXPECT_FLOAT_EQ(Values(events[1])["train/loss"], 0.4f);
}

// eval: sidecar / none: the epoch's scalars claim no eval metric.
TEST(JobSummariesTest, NoEpochEvalScalarsWithoutInlineEval) {
  JobSummaries::Options o = TestOptions("no_inline_eval", 0);
  o.inline_eval = false;
  auto summaries = JobSummaries::Create(o);
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  EpochResult r;
  r.set_epoch(1);
  r.set_train_loss(0.5);
  (*summaries)->EpochFinished(30, r, 10.0, {});
  const std::vector<tensorflow::Event> events = ReadSummaries((*summaries)->path());
  ASSERT_EQ(events.size(), 1u);
  const std::map<std::string, float> values = Values(events[0]);
  EXPECT_EQ(values.count("epoch/train_loss"), 1u);
  for (const auto& [tag, value] : values) EXPECT_EQ(tag.find("eval"), std::string::npos) << tag;
}

TEST(JobSummariesTest, PointsRestartAfterARollback) {
  auto summaries = JobSummaries::Create(TestOptions("rollback", 10));
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  (*summaries)->TrainClosure(12, 10, 10, 1);  // point at 12, next at 20
  (*summaries)->TrainClosure(16, 10, 99, 1);  // undone by the rollback
  (*summaries)->RolledBack(0);
  (*summaries)->TrainClosure(4, 10, 20, 1);
  (*summaries)->TrainClosure(10, 10, 40, 1);  // point at 10
  const std::vector<tensorflow::Event> events = ReadSummaries((*summaries)->path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 10);
  EXPECT_FLOAT_EQ(Values(events[1])["train/loss"], 3.0f);
}

TEST(JobSummariesTest, ClosuresOutOfStepOrderAreNotARollback) {
  auto summaries = JobSummaries::Create(TestOptions("reordered", 10));
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  // Two workers' closures: 12 reported before 8.
  for (int64_t steps : {4, 12, 8, 16, 20}) (*summaries)->TrainClosure(steps, 10, 10, 1);
  std::vector<int64_t> points;
  for (const tensorflow::Event& e : ReadSummaries((*summaries)->path())) points.push_back(e.step());
  EXPECT_THAT(points, ElementsAre(12, 20));
}

TEST(JobSummariesTest, EveryStepsZeroWritesEpochsOnly) {
  auto summaries = JobSummaries::Create(TestOptions("epochs-only", 0));
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  for (int c = 1; c <= 10; ++c) (*summaries)->TrainClosure(100 * c, 10, 10, 1);
  EXPECT_TRUE(ReadSummaries((*summaries)->path()).empty());
}

TEST(JobSummariesTest, EpochsPsBytesAndCheckpoints) {
  JobSummaries::Options options = TestOptions("epoch", 0);
  // A schedule: the rate is the schedule's at the step, not the peak.
  LearningRateScheduleProto* schedule = options.optimizer.mutable_schedule();
  schedule->set_initial(0.25f);
  schedule->set_warmup_steps(100);
  auto summaries = JobSummaries::Create(options);
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  EpochResult r;
  r.set_epoch(1);
  r.set_train_loss(0.7);
  r.set_eval_loss(0.6);
  r.set_eval_accuracy(0.8125);
  r.set_wall_seconds(3.5);
  PsLoad ps0, ps1;
  ps0.set_ps_index(0);
  ps0.set_parameter_bytes(4000);
  ps0.set_slot_bytes(8000);
  ps1.set_ps_index(1);
  ps1.set_parameter_bytes(40);
  (*summaries)->EpochFinished(50, r, 1234.0, {ps0, ps1});
  r.set_epoch(2);
  r.set_eval_auc(0.75);
  (*summaries)->EpochFinished(100, r, 1000.0, {});
  (*summaries)->CheckpointCommitted(3, 100, 123456);
  const std::vector<tensorflow::Event> events = ReadSummaries((*summaries)->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].step(), 50);
  EXPECT_THAT(
      Values(events[0]),
      UnorderedElementsAre(Pair("epoch", 1.0f), Pair("epoch/train_loss", 0.7f),
                           Pair("epoch/eval_loss", 0.6f), Pair("epoch/eval_accuracy", 0.8125f),
                           Pair("epoch/wall_seconds", 3.5f),
                           Pair("train/learning_rate", 0.125f),  // half way up the warmup
                           Pair("train/examples_per_sec", 1234.0f),
                           Pair("ps/0/parameter_bytes", 4000.0f), Pair("ps/0/slot_bytes", 8000.0f),
                           Pair("ps/1/parameter_bytes", 40.0f), Pair("ps/1/slot_bytes", 0.0f)));
  EXPECT_FLOAT_EQ(Values(events[1])["epoch/eval_auc"], 0.75f);
  EXPECT_FLOAT_EQ(Values(events[1])["train/learning_rate"], 0.25f);
  EXPECT_EQ(events[2].step(), 100);
  EXPECT_THAT(Values(events[2]), UnorderedElementsAre(Pair("checkpoint/id", 3.0f),
                                                      Pair("checkpoint/bytes", 123456.0f)));
}

TEST(JobSummariesTest, ALogdirThatCannotBeCreatedIsNamed) {
  const std::string dir = TempDir("blocked");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/file") << "x";
  JobSummaries::Options options = TestOptions("unused", 10);
  options.logdir = dir + "/file/tb";
  auto summaries = JobSummaries::Create(options);
  ASSERT_FALSE(summaries.ok());
  EXPECT_THAT(std::string(summaries.status().message()),
              ::testing::AllOf(::testing::HasSubstr("summaries.logdir"),
                               ::testing::HasSubstr(dir + "/file/tb")));
}

}  // namespace
}  // namespace pscluster
