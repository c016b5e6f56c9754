// StreamBatches: the examples of one streaming closure (a unit of the
// coordinator's epoch plan: records [begin, end) of one file, DataSplit),
// batch by batch, with memory bounded by the job's stream settings:
//
//   RecordPrefetcher (a reader thread, at most prefetch_bytes queued)
//     -> ShuffleBuffer (shuffle_buffer records, seeded by (job seed, epoch,
//        file, begin): a retried closure sees the same order)
//     -> each record parsed (a line of the source's columns, or a
//        tf.Example whose features are named by them)
//     -> RowEncoder (row_encoder.h), the rows-to-examples conversion of the
//        in-memory loader
//   all on a parser thread that keeps up to kBatchesAhead batches encoded
//   ahead of Next, so that parsing overlaps the step's compute and its wait
//   for the PS. The batches are the same, in the same order, as one thread
//   would make them.
//
// A corrupt record (a bad CRC, a line over the size limit, a field or
// Example that does not parse, an id outside a fixed vocabulary) is skipped
// and counted, or fails the closure, as stream.corrupt_records says; either
// way it is named by file and line, byte offset or record number. A blank
// line and a row without a label are passed over, as the in-memory loader
// does.
//
// Thread-safety: thread-compatible (one closure's thread); the prefetcher's
// reader thread and the parser thread are stopped and joined by the
// destructor.
#ifndef PSCLUSTER_WORKER_CORE_STREAM_BATCHES_H_
#define PSCLUSTER_WORKER_CORE_STREAM_BATCHES_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/csv_reader.h"
#include "common/job_spec.h"
#include "protos/worker.pb.h"
#include "worker/core/dataset.h"
#include "worker/core/example_fields.h"
#include "worker/core/record_stream.h"
#include "worker/core/row_encoder.h"

namespace pscluster {

class StreamBatches {
 public:
  // Reads split's records of its file (REQUIRES: split.path() set) of
  // `source` (csv or tfrecord, streaming), converting them with `encoder`
  // (not owned; outlives this). `shuffle`: data.shuffle (off: file order).
  StreamBatches(const DataSourceSpec& source, const RowEncoder* encoder, const DataSplit& split,
                uint64_t seed, bool shuffle);
  ~StreamBatches();
  StreamBatches(const StreamBatches&) = delete;
  StreamBatches& operator=(const StreamBatches&) = delete;

  // The next examples, up to `n`, into `*batch` (replaced); fewer only at
  // the unit's end (then 0 ever after). The first call's `n` sets the
  // parser's batch size: a later call with another `n` is
  // FAILED_PRECONDITION unless fewer than both are left. Errors: NOT_FOUND
  // (a missing file), DATA_LOSS or INVALID_ARGUMENT for a corrupt record
  // under corrupt_records: fail, naming it.
  absl::Status Next(int64_t n, Dataset* batch) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for the reader's end (the unit's records all taken by Next), so
  // that corrupt() is final. FAILED_PRECONDITION if records were left (the
  // caller asked for fewer than the unit holds); the read's error.
  absl::Status Finish();

  // Records skipped as corrupt so far (final once Next returned fewer than
  // asked), and the first one's message ("" if none).
  int64_t corrupt() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string first_corrupt() const ABSL_LOCKS_EXCLUDED(mu_);
  // The most bytes the prefetch queue held at once.
  int64_t peak_prefetch_bytes() const { return prefetcher_->peak_bytes(); }

  // Encoded batches the parser keeps ready ahead of Next.
  static constexpr size_t kBatchesAhead = 2;

 private:
  // The parser thread: batches of batch_size_ examples into ready_ until
  // the unit's end, an error or stop_.
  void ParseLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // One batch of up to `n` examples (parser thread).
  absl::Status Fill(int64_t n, Dataset* batch) ABSL_LOCKS_EXCLUDED(mu_);
  // The next record, shuffled; false at the unit's end (parser thread).
  absl::StatusOr<bool> NextRecord(RecordPrefetcher::Record* record);
  // Parses `record` into fields_ (text of the fields may point into it or
  // into example_fields_, until the next Parse) (parser thread).
  absl::Status Parse(const std::string& record);

  const DataSourceSpec& source_;
  const RowEncoder* const encoder_;
  const std::string path_;
  std::unique_ptr<RecordPrefetcher> prefetcher_;
  // The parser thread's own state.
  ShuffleBuffer<RecordPrefetcher::Record> shuffle_;
  bool input_done_ = false;
  std::vector<CsvField> fields_;
  ExampleFields example_fields_;  // tfrecord: the columns out of each tf.Example

  mutable absl::Mutex mu_;
  CorruptRecords parse_errors_ ABSL_GUARDED_BY(mu_);
  int64_t batch_size_ = 0;  // set by the first Next, before the parser starts
  std::deque<Dataset> ready_ ABSL_GUARDED_BY(mu_);
  // The parser's end: OUT_OF_RANGE at the unit's end, or its error.
  bool parsed_all_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status parse_status_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread parser_;
};

// The seed of a streaming unit's shuffle buffer.
uint64_t StreamShuffleSeed(uint64_t job_seed, const DataSplit& split);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_STREAM_BATCHES_H_
