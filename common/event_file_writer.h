// TensorBoard event files without TensorFlow: a writer of the files
// TensorBoard reads from a logdir (`tensorboard --logdir DIR`).
//
// A file is named events.out.tfevents.<unix seconds>.<hostname>.<pid> (a
// ".N" suffix when that name is taken) and holds TFRecord-framed
// (common/tfrecord.h) tensorflow.Event messages
// (protos/tensorboard_event.proto): first one whose file_version is
// "brain.Event:2", then one per WriteScalars with its values in one Summary.
// Each write is flushed, so that a TensorBoard watching the directory sees it
// at once; no fsync (a crash may lose the last records, and a reader stops at a
// torn one).
//
// Thread-compatible: one thread at a time (callers that write from several
// threads hold their own lock: coordinator/core/job_summaries.h).
#ifndef PSCLUSTER_COMMON_EVENT_FILE_WRITER_H_
#define PSCLUSTER_COMMON_EVENT_FILE_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "protos/tensorboard_event.pb.h"

namespace pscluster {

// The file_version of the first record of every event file.
inline constexpr char kEventFileVersion[] = "brain.Event:2";

class EventFileWriter {
 public:
  struct Options {
    // The directory of the file; created (with its parents) if missing.
    std::string logdir;
    // The time in the file's name and of its file_version record.
    absl::Time now = absl::Now();
    // The host in the file's name; empty: gethostname().
    std::string hostname;
  };

  // Creates a new event file in options.logdir (never overwriting one) and
  // writes its file_version record.
  // INVALID_ARGUMENT for an empty logdir; otherwise the errno's code, the
  // message naming the directory or the file that could not be created or
  // written.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(const Options& options);

  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends one event at `step` and `wall_time` whose summary holds every
  // (tag, value) of `scalars` as a float simple_value, and flushes it.
  // Errors (the errno's code) name the file.
  absl::Status WriteScalars(int64_t step, absl::Time wall_time,
                            const std::vector<std::pair<std::string, double>>& scalars);

  // Appends `event` as it is, and flushes it. Errors name the file.
  absl::Status WriteEvent(const tensorflow::Event& event);

  // The file's path: <logdir>/events.out.tfevents.<...>.
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  const std::string path_;
  std::FILE* const file_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_EVENT_FILE_WRITER_H_
