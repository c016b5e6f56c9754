#include "client/progress.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/time/clock.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

JobStatusProto Running() {
  JobStatusProto s;
  s.set_job_id("job-7");
  s.set_name("mnist");
  s.set_state(RUNNING);
  s.set_epoch(1);
  s.set_total_epochs(5);
  s.set_steps(469);
  s.set_total_steps(2345);
  s.set_examples(30016);
  s.set_examples_per_sec(12345.4);
  s.set_train_loss(0.51234);
  return s;
}

void AddEpoch(JobStatusProto* s, double accuracy) {
  EpochResult* e = s->add_epochs();
  e->set_epoch(s->epochs_size());
  e->set_eval_accuracy(accuracy);
  s->set_eval_accuracy(accuracy);
}

// Reads back what a printer wrote to a memory-backed FILE.
class Captured {
 public:
  Captured() : file_(open_memstream(&buf_, &size_)) {}
  ~Captured() {
    std::fclose(file_);
    free(buf_);
  }
  std::FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(buf_, size_);
  }

 private:
  char* buf_ = nullptr;
  size_t size_ = 0;
  std::FILE* file_;
};

TEST(ProgressTest, PlainLineHasTheDocumentedShape) {
  JobStatusProto s = Running();
  EXPECT_EQ(FormatProgressLine(s), "epoch 1/5 step 469/2345 loss 0.5123 examples/s 12345");
  AddEpoch(&s, 0.84119);
  EXPECT_EQ(FormatProgressLine(s),
            "epoch 1/5 step 469/2345 loss 0.5123 examples/s 12345 eval_accuracy 0.8412");
}

TEST(ProgressTest, BarFillsWithTheStepFraction) {
  JobStatusProto s = Running();
  s.set_steps(500);
  s.set_total_steps(1000);
  EXPECT_EQ(FormatProgressBar(s, 10),
            "epoch 1/5 [=====>    ]  50% step 500/1000 | 12345 ex/s | loss 0.5123");
  s.set_steps(1000);
  AddEpoch(&s, 0.9);
  EXPECT_EQ(FormatProgressBar(s, 10),
            "epoch 1/5 [==========] 100% step 1000/1000 | 12345 ex/s | loss 0.5123 | acc 0.9000");
  s.set_steps(0);
  s.set_total_steps(0);  // unknown total: an empty bar, not a division by zero
  EXPECT_THAT(FormatProgressBar(s, 4), HasSubstr("[>   ]   0%"));
}

TEST(ProgressTest, SummaryHasFinalMetricsAndError) {
  JobStatusProto s = Running();
  s.set_state(FAILED);
  s.set_wall_seconds(12.34);
  s.set_backend("cpu");
  s.set_error("worker-1 unreachable");
  AddEpoch(&s, 0.85);
  s.set_eval_loss(0.4321);
  const std::string summary = FormatSummary(s);
  EXPECT_THAT(summary, HasSubstr("job mnist (job-7): FAILED\n"));
  EXPECT_THAT(summary, HasSubstr("train loss      0.5123\n"));
  EXPECT_THAT(summary, HasSubstr("eval accuracy   0.8500 (eval loss 0.4321)\n"));
  EXPECT_THAT(summary, HasSubstr("steps           469/2345 (30016 examples, 1/5 epochs)\n"));
  EXPECT_THAT(summary, HasSubstr("examples/s      12345\n"));
  EXPECT_THAT(summary, HasSubstr("wall time       12.3 s\n"));
  EXPECT_THAT(summary, HasSubstr("error           worker-1 unreachable\n"));
  s.clear_error();
  EXPECT_THAT(FormatSummary(s), Not(HasSubstr("error")));
}

TEST(ProgressTest, StateNames) {
  EXPECT_EQ(JobStateName(SUCCEEDED), "SUCCEEDED");
  EXPECT_EQ(JobStateName(static_cast<JobState>(42)), "STATE_42");
  EXPECT_TRUE(IsFinalState(CANCELLED));
  EXPECT_FALSE(IsFinalState(RUNNING));
}

TEST(ProgressPrinterTest, LinesAreThrottledButEveryEpochEndIsPrinted) {
  Captured out;
  ProgressPrinter printer(out.file(), ProgressPrinter::Mode::kLines, absl::Seconds(2));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  JobStatusProto s = Running();
  JobStatusProto pending;
  pending.set_state(QUEUED);
  printer.Update(pending, t0 - absl::Seconds(5));  // nothing to show yet
  JobStatusProto starting = Running();
  starting.set_steps(0);
  starting.set_total_steps(0);
  printer.Update(starting, t0 - absl::Seconds(3));  // size not known yet
  printer.Update(s, t0);                           // first: printed
  printer.Update(s, t0 + absl::Milliseconds(500));  // throttled
  printer.Update(s, t0 + absl::Seconds(1));         // throttled
  AddEpoch(&s, 0.8);
  printer.Update(s, t0 + absl::Milliseconds(1500));  // epoch end: printed anyway
  printer.Update(s, t0 + absl::Seconds(2));          // throttled (since the epoch line)
  printer.Update(s, t0 + absl::Seconds(4));          // printed
  s.set_state(SUCCEEDED);
  printer.Update(s, t0 + absl::Seconds(10));  // final: left to the summary
  printer.Finish();
  const std::string text = out.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3) << text;
  EXPECT_THAT(text, HasSubstr("eval_accuracy 0.8000\n"));
  EXPECT_THAT(text, Not(HasSubstr("\r")));
}

TEST(ProgressPrinterTest, BarRedrawsOneLineAndEndsIt) {
  Captured out;
  ProgressPrinter printer(out.file(), ProgressPrinter::Mode::kBar);
  JobStatusProto s = Running();
  s.set_examples_per_sec(123456789);  // a longer line first
  printer.Update(s, absl::Now());
  const size_t first_length = out.text().size() - 1;  // minus '\r'
  s.set_examples_per_sec(1);
  printer.Update(s, absl::Now());
  printer.Finish();
  const std::string text = out.text();
  EXPECT_EQ(text.front(), '\r');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 2);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_EQ(text.back(), '\n');
  // The second draw is padded to cover the first one completely.
  const size_t second = text.rfind('\r');
  EXPECT_EQ(text.size() - second - 2, first_length);
}

// A rerun whose checkpoint already covered every epoch trained nothing: the
// summary says so, naming the directory, instead of showing 0 examples/s.
TEST(FormatSummaryTest, AlreadyCompleteRunSaysNothingWasTrained) {
  JobStatusProto s;
  s.set_state(SUCCEEDED);
  s.set_total_epochs(5);
  s.set_already_complete(true);
  const std::string summary = FormatSummary(s, "/ckpt/mnist");
  EXPECT_THAT(summary, HasSubstr("nothing trained in this run: the checkpoint in /ckpt/mnist "
                                 "already covers all 5 epochs"));
  EXPECT_THAT(summary, Not(HasSubstr("examples/s")));
  s.set_already_complete(false);
  EXPECT_THAT(FormatSummary(s, "/ckpt/mnist"), HasSubstr("examples/s"));
}

TEST(FormatSummaryTest, QueuedJobShowsItsQueuePosition) {
  JobStatusProto s;
  s.set_state(QUEUED);
  s.set_queue_position(2);
  EXPECT_THAT(FormatSummary(s), HasSubstr("queue position  2"));
}

}  // namespace
}  // namespace pscluster
