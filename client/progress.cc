#include "client/progress.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pscluster {
namespace {

double Fraction(const JobStatusProto& s) {
  if (s.total_steps() <= 0) return 0.0;
  return std::clamp(static_cast<double>(s.steps()) / static_cast<double>(s.total_steps()), 0.0, 1.0);
}

// The coordinator measured eval metrics: an epoch finished, with eval:
// inline (eval_mode empty: a coordinator from before eval modes).
bool HasEval(const JobStatusProto& s) {
  return s.epochs_size() > 0 && (s.eval_mode().empty() || s.eval_mode() == "inline");
}

}  // namespace

std::string JobStateName(JobState state) {
  const std::string& name = JobState_Name(state);
  return name.empty() ? absl::StrCat("STATE_", static_cast<int>(state)) : name;
}

bool IsFinalState(JobState state) {
  return state == SUCCEEDED || state == FAILED || state == CANCELLED;
}

std::string FormatProgressBar(const JobStatusProto& s, int bar_width) {
  bar_width = std::max(bar_width, 1);
  const double frac = Fraction(s);
  const int filled = static_cast<int>(std::floor(frac * bar_width));
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < bar_width) bar += '>';
  bar.resize(static_cast<size_t>(bar_width), ' ');
  std::string line = absl::StrFormat("epoch %d/%d [%s] %3d%% step %d/%d | %.0f ex/s | loss %.4f",
                                     s.epoch(), s.total_epochs(), bar,
                                     static_cast<int>(std::floor(frac * 100)), s.steps(),
                                     s.total_steps(), s.examples_per_sec(), s.train_loss());
  if (HasEval(s)) absl::StrAppendFormat(&line, " | acc %.4f", s.eval_accuracy());
  if (HasEval(s) && s.eval_auc() > 0) absl::StrAppendFormat(&line, " | auc %.4f", s.eval_auc());
  return line;
}

std::string FormatProgressLine(const JobStatusProto& s) {
  std::string line =
      absl::StrFormat("epoch %d/%d step %d/%d loss %.4f examples/s %.0f", s.epoch(),
                      s.total_epochs(), s.steps(), s.total_steps(), s.train_loss(),
                      s.examples_per_sec());
  if (HasEval(s)) absl::StrAppendFormat(&line, " eval_accuracy %.4f", s.eval_accuracy());
  if (HasEval(s) && s.eval_auc() > 0) absl::StrAppendFormat(&line, " eval_auc %.4f", s.eval_auc());
  return line;
}

std::string AlreadyCompleteNotice(const JobStatusProto& s, const std::string& checkpoint_dir) {
  const std::string where =
      checkpoint_dir.empty() ? "the job's checkpoint directory" : checkpoint_dir;
  return absl::StrFormat(
      "nothing trained in this run: the checkpoint in %s already covers all %d epochs; remove it "
      "or change checkpoint.dir to train again",
      where, s.total_epochs());
}

std::string FormatSummary(const JobStatusProto& s, const std::string& checkpoint_dir) {
  std::string out = absl::StrFormat("job %s (%s): %s\n", s.name(), s.job_id(), JobStateName(s.state()));
  if (s.state() == QUEUED) {
    absl::StrAppendFormat(&out, "  queue position  %d\n", s.queue_position());
  }
  if (s.already_complete()) {
    absl::StrAppendFormat(&out, "  %s\n", AlreadyCompleteNotice(s, checkpoint_dir));
  }
  absl::StrAppendFormat(&out, "  train loss      %.4f\n", s.train_loss());
  if (s.eval_mode() == "sidecar" || s.eval_mode() == "none") {
    absl::StrAppendFormat(&out, "  eval            %s\n",
                          s.eval_mode() == "sidecar"
                              ? "sidecar (the evaluator process evaluates the checkpoints)"
                              : "none");
  }
  if (HasEval(s)) {
    absl::StrAppendFormat(&out, "  eval accuracy   %.4f (eval loss %.4f)\n", s.eval_accuracy(),
                          s.eval_loss());
    if (s.eval_auc() > 0) {
      absl::StrAppendFormat(&out, "  eval AUC        %.4f (logloss %.4f)\n", s.eval_auc(),
                            s.eval_loss());
    }
  }
  absl::StrAppendFormat(&out, "  steps           %d/%d (%d examples, %d/%d epochs)\n", s.steps(),
                        s.total_steps(), s.examples(), s.epochs_size(), s.total_epochs());
  // An already complete run trained nothing: 0 examples/s is no measurement.
  if (!s.already_complete()) {
    absl::StrAppendFormat(&out, "  examples/s      %.0f\n", s.examples_per_sec());
  }
  absl::StrAppendFormat(&out, "  wall time       %.1f s\n", s.wall_seconds());
  if (!s.strategy().empty()) absl::StrAppendFormat(&out, "  strategy        %s\n", s.strategy());
  if (s.replicas() > 0) {
    absl::StrAppendFormat(&out, "  batch           %d global = %d per replica x %d replicas\n",
                          s.global_batch(), s.per_replica_batch(), s.replicas());
  }
  if (!s.learning_rate().empty()) {
    absl::StrAppendFormat(&out, "  learning rate   %s\n", s.learning_rate());
  }
  // Faults the job lived through, and what they cost.
  if (s.ps_recoveries() > 0 || s.lost_steps() > 0 || s.workers_lost() > 0) {
    absl::StrAppendFormat(&out,
                          "  faults          %d %s, %d workers lost, %d steps lost "
                          "(%d trained in all)\n",
                          s.ps_recoveries(),
                          s.strategy() == "multi_worker_mirrored" ? "rollbacks of every copy"
                                                                  : "PS recoveries",
                          s.workers_lost(), s.lost_steps(), s.steps_trained());
  }
  if (s.ps_applied_steps_size() > 0) {
    std::string applied;
    for (int64_t a : s.ps_applied_steps()) absl::StrAppend(&applied, applied.empty() ? "" : ", ", a);
    // Each PS applies each step once (a PS that holds no variable, none);
    // a multi_worker_mirrored job's one entry is replica 0's copy.
    const char* by = s.strategy() == "multi_worker_mirrored" ? "by replica 0's copy"
                     : s.ps_applied_steps_size() == 1       ? "by PS 0"
                                                             : "by PS 0, 1, ...";
    absl::StrAppendFormat(&out, "  steps applied   %s (%s)\n", applied, by);
  }
  if (s.checkpoint_failures() > 0) {
    absl::StrAppendFormat(&out, "  checkpoints     %d failed%s: %s\n", s.checkpoint_failures(),
                          s.checkpoints_disabled() ? ", then turned off for the job" : "",
                          s.checkpoint_error());
  }
  if (!s.backend().empty()) absl::StrAppendFormat(&out, "  backend         %s\n", s.backend());
  if (!s.error().empty()) absl::StrAppendFormat(&out, "  error           %s\n", s.error());
  return out;
}

ProgressPrinter::ProgressPrinter(std::FILE* out, Mode mode, absl::Duration min_interval)
    : out_(out), mode_(mode), min_interval_(min_interval) {}

void ProgressPrinter::Update(const JobStatusProto& status, absl::Time now) {
  if (mode_ == Mode::kBar) {
    const std::string line = FormatProgressBar(status, 30);
    // Pad with blanks to wipe the tail of a longer previous line.
    const size_t pad = last_bar_length_ > line.size() ? last_bar_length_ - line.size() : 0;
    std::fprintf(out_, "\r%s%s", line.c_str(), std::string(pad, ' ').c_str());
    std::fflush(out_);
    last_bar_length_ = line.size();
    bar_drawn_ = true;
    return;
  }
  const bool epoch_ended = status.epochs_size() > epochs_seen_;
  epochs_seen_ = std::max(epochs_seen_, status.epochs_size());
  // A pending job (or one whose size is not known yet) has nothing to show,
  // and the last update of a finished one adds nothing beyond the summary.
  if (status.state() == QUEUED || status.state() == JOB_STATE_UNKNOWN) return;
  if (status.total_steps() == 0 && !epoch_ended) return;
  if (IsFinalState(status.state()) && !epoch_ended) return;
  if (!epoch_ended && now - last_line_ < min_interval_) return;
  std::fprintf(out_, "%s\n", FormatProgressLine(status).c_str());
  std::fflush(out_);
  last_line_ = now;
}

void ProgressPrinter::Finish() {
  if (mode_ == Mode::kBar && bar_drawn_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    bar_drawn_ = false;
    last_bar_length_ = 0;
  }
}

}  // namespace pscluster
