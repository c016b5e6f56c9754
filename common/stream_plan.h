// StreamPlan: a streaming source's files (data.*.stream; docs/
// streaming_input.md), indexed once per job, and the units each epoch of it
// is cut into. A unit is one closure's work:
//  - shard: data: records [k U, (k + 1) U) of a file, U = steps_per_closure
//    x batch (a file's last unit may be shorter), with the byte offset of
//    its first record so that the worker seeks there (plain text and
//    TFRecord; gzip cannot seek and is refused for data);
//  - shard: file: a whole file (TF's AutoShard FILE), steps from its count.
// An epoch's units are the same every epoch; their order is shuffled by
// (seed, epoch) when data.shuffle is on. A unit's index in the (unshuffled)
// plan is its split index, so the finished splits a checkpoint or job log
// records are input positions; fingerprint() names the file set they refer
// to.
//
// Thread-safety: immutable after Create; safe to share across threads.
#ifndef PSCLUSTER_COMMON_STREAM_PLAN_H_
#define PSCLUSTER_COMMON_STREAM_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "protos/worker.pb.h"

namespace pscluster {

class StreamPlan {
 public:
  // Expands `source`'s path patterns (sorted, common/record_index.h),
  // indexes each file and cuts the units: `unit_records` records each
  // (shard: data), `batch` examples a step. REQUIRES: source.stream.enabled,
  // unit_records > 0, batch > 0. Errors:
  //   NOT_FOUND         a pattern that matches no file, a file that cannot
  //                     be opened
  //   INVALID_ARGUMENT  shard: data over a gzip file; a file set without
  //                     any record
  //   DATA_LOSS         a file whose rest cannot be read (a TFRecord whose
  //                     framing is lost, a truncated gzip stream), naming it
  //                     and the byte offset, under corrupt_records: fail
  //                     (under skip, lost_tails() names it and the records
  //                     before it are planned)
  static absl::StatusOr<StreamPlan> Create(const DataSourceSpec& source, int64_t unit_records,
                                           int64_t batch);

  // The splits of `epoch` in the order to queue them (shuffled by (seed,
  // epoch) when `shuffle`): split i of the result has index
  // split_indices[i] in the plan. Each names its file, record range and
  // byte offset, its first step among the epoch's and the epoch's steps.
  struct Epoch {
    std::vector<DataSplit> splits;
    std::vector<int64_t> split_indices;
  };
  Epoch ForEpoch(int64_t epoch, uint64_t seed, bool shuffle) const;

  int64_t files() const { return static_cast<int64_t>(files_.size()); }
  int64_t records() const { return records_; }
  int64_t units() const { return static_cast<int64_t>(units_.size()); }
  // Steps of one epoch: the sum over units of ceil(records / batch).
  int64_t epoch_steps() const { return epoch_steps_; }
  // "files=F records=R crc32c=XXXXXXXX": the CRC32C of every file's path,
  // size and record count, in plan order.
  const std::string& fingerprint() const { return fingerprint_; }
  // Files whose rest could not be read, each "file F, record at byte B:
  // ..." (corrupt_records: skip).
  const std::vector<std::string>& lost_tails() const { return lost_tails_; }

 private:
  struct Unit {
    int file = 0;
    int64_t begin = 0;
    int64_t end = 0;
    int64_t offset = 0;
    int64_t steps = 0;
  };
  StreamPlan() = default;

  std::vector<std::string> files_;
  std::vector<Unit> units_;
  int64_t records_ = 0;
  int64_t epoch_steps_ = 0;
  std::string fingerprint_;
  std::vector<std::string> lost_tails_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_STREAM_PLAN_H_
