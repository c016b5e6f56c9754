#include "coordinator/core/job_summaries.h"

#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"

namespace pscluster {
namespace {

// The first multiple of `every` above `steps`.
int64_t NextPoint(int64_t steps, int64_t every) { return (steps / every + 1) * every; }

}  // namespace

absl::StatusOr<std::unique_ptr<JobSummaries>> JobSummaries::Create(Options options) {
  EventFileWriter::Options writer_options;
  writer_options.logdir = options.logdir;
  writer_options.now = options.now();
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer = EventFileWriter::Create(writer_options);
  if (!writer.ok()) {
    return absl::Status(writer.status().code(),
                        absl::StrCat("summaries.logdir: ", writer.status().message()));
  }
  return std::unique_ptr<JobSummaries>(new JobSummaries(std::move(options), *std::move(writer)));
}

JobSummaries::JobSummaries(Options options, std::unique_ptr<EventFileWriter> writer)
    : options_(std::move(options)), path_(writer->path()), writer_(std::move(writer)) {
  if (options_.every_steps > 0) next_point_ = options_.every_steps;
}

double JobSummaries::LearningRate(int64_t step) const {
  if (options_.optimizer.has_schedule()) return LearningRateAt(options_.optimizer.schedule(), step);
  return options_.optimizer.learning_rate();
}

void JobSummaries::Write(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  if (writer_ == nullptr) return;
  absl::Status s = writer_->WriteScalars(step, options_.now(), scalars);
  if (s.ok()) return;
  writer_.reset();
  if (options_.on_error) {
    options_.on_error(absl::StrCat("TensorBoard summaries stopped: ", s.message(),
                                   "; the job goes on without them"));
  }
}

void JobSummaries::TrainClosure(int64_t steps, int64_t examples, double loss_sum,
                                double examples_per_sec) {
  if (options_.every_steps <= 0) return;
  absl::MutexLock lock(&mu_);
  examples_ += examples;
  loss_sum_ += loss_sum;
  if (steps < next_point_ || examples_ <= 0) return;
  Write(steps, {{"train/loss", loss_sum_ / examples_},
                {"train/learning_rate", LearningRate(steps)},
                {"train/examples_per_sec", examples_per_sec}});
  examples_ = 0;
  loss_sum_ = 0;
  next_point_ = NextPoint(steps, options_.every_steps);
}

void JobSummaries::RolledBack(int64_t steps) {
  if (options_.every_steps <= 0) return;
  absl::MutexLock lock(&mu_);
  examples_ = 0;
  loss_sum_ = 0;
  next_point_ = NextPoint(steps, options_.every_steps);
}

void JobSummaries::EpochFinished(int64_t steps, const EpochResult& result, double examples_per_sec,
                                 const std::vector<PsLoad>& ps) {
  std::vector<std::pair<std::string, double>> scalars = {
      {"epoch", static_cast<double>(result.epoch())},
      {"epoch/train_loss", result.train_loss()},
      {"epoch/wall_seconds", result.wall_seconds()},
      {"train/learning_rate", LearningRate(steps)},
      {"train/examples_per_sec", examples_per_sec},
  };
  if (options_.inline_eval) {
    scalars.push_back({"epoch/eval_loss", result.eval_loss()});
    scalars.push_back({"epoch/eval_accuracy", result.eval_accuracy()});
    if (result.eval_auc() > 0) scalars.push_back({"epoch/eval_auc", result.eval_auc()});
  }
  for (const PsLoad& p : ps) {
    scalars.push_back({absl::StrCat("ps/", p.ps_index(), "/parameter_bytes"),
                       static_cast<double>(p.parameter_bytes())});
    scalars.push_back(
        {absl::StrCat("ps/", p.ps_index(), "/slot_bytes"), static_cast<double>(p.slot_bytes())});
  }
  absl::MutexLock lock(&mu_);
  Write(steps, scalars);
}

void JobSummaries::CheckpointCommitted(int64_t checkpoint_id, int64_t step, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  Write(step, {{"checkpoint/id", static_cast<double>(checkpoint_id)},
               {"checkpoint/bytes", static_cast<double>(bytes)}});
}

}  // namespace pscluster
