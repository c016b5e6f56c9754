// Rendering of a job's JobStatusProto for psctl: a one-line progress bar for
// terminals, throttled plain progress lines for logs and pipes, and the final
// summary printed when the job ends.
//
// The Format* functions are pure. ProgressPrinter is not thread-safe: call it
// from one thread (the one reading the WatchJob stream).
#ifndef PSCLUSTER_CLIENT_PROGRESS_H_
#define PSCLUSTER_CLIENT_PROGRESS_H_

#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "protos/coordinator.pb.h"

namespace pscluster {

// "SUCCEEDED", "RUNNING", ...
std::string JobStateName(JobState state);

// True for SUCCEEDED, FAILED and CANCELLED: the job will not change again.
bool IsFinalState(JobState state);

// One terminal line, without '\r' or newline:
// "epoch 1/5 [=======>            ]  42% step 985/2345 | 12345 ex/s | loss 0.5123 | acc 0.8412"
// `bar_width` counts the cells between the brackets. The accuracy appears
// once an epoch has been evaluated.
std::string FormatProgressBar(const JobStatusProto& status, int bar_width);

// One log line, without newline:
// "epoch 1/5 step 469/2345 loss 0.5123 examples/s 12345 eval_accuracy 0.8412"
std::string FormatProgressLine(const JobStatusProto& status);

// Why a run trained nothing (status.already_complete()): "nothing trained in
// this run: the checkpoint in DIR already covers all N epochs; ...". An empty
// `checkpoint_dir` (not known to the caller) is named generically.
std::string AlreadyCompleteNotice(const JobStatusProto& status, const std::string& checkpoint_dir);

// The closing report: state, final metrics, wall time, one line each, ending
// in a newline. Includes the job's error when it has one, the queue position
// of a QUEUED job, and, for an already complete run, AlreadyCompleteNotice in
// place of the (meaningless) examples/s.
std::string FormatSummary(const JobStatusProto& status, const std::string& checkpoint_dir = "");

// Draws progress for a stream of status updates.
class ProgressPrinter {
 public:
  enum class Mode {
    kBar,    // redraw one line with '\r' (for a TTY)
    kLines,  // plain lines: at most one per `min_interval`, plus one per epoch end
  };

  // `out` is not owned and must outlive the printer.
  ProgressPrinter(std::FILE* out, Mode mode, absl::Duration min_interval = absl::Seconds(2));

  // Renders `status` as seen at time `now` (if the mode says it is due).
  void Update(const JobStatusProto& status, absl::Time now);

  // Ends the bar line (newline) if one is drawn. Call before other output.
  void Finish();

 private:
  std::FILE* out_;
  Mode mode_;
  absl::Duration min_interval_;
  absl::Time last_line_ = absl::InfinitePast();
  int epochs_seen_ = 0;
  size_t last_bar_length_ = 0;
  bool bar_drawn_ = false;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_PROGRESS_H_
