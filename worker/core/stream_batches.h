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
//        in-memory loader.
//
// A corrupt record (a bad CRC, a line over the size limit, a field or
// Example that does not parse, an id outside a fixed vocabulary) is skipped
// and counted, or fails the closure, as stream.corrupt_records says; either
// way it is named by file and line, byte offset or record number. A blank
// line and a row without a label are passed over, as the in-memory loader
// does.
//
// Thread-safety: thread-compatible (one closure's thread); the prefetcher
// runs its own reader thread, stopped and joined by the destructor.
#ifndef PSCLUSTER_WORKER_CORE_STREAM_BATCHES_H_
#define PSCLUSTER_WORKER_CORE_STREAM_BATCHES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  // the unit's end (then 0 ever after). Errors: NOT_FOUND (a missing file),
  // DATA_LOSS or INVALID_ARGUMENT for a corrupt record under
  // corrupt_records: fail, naming it.
  absl::Status Next(int64_t n, Dataset* batch);

  // Waits for the reader's end (the unit's records all taken by Next), so
  // that corrupt() is final. FAILED_PRECONDITION if records were left (the
  // caller asked for fewer than the unit holds); the read's error.
  absl::Status Finish();

  // Records skipped as corrupt so far (final once Next returned fewer than
  // asked), and the first one's message ("" if none).
  int64_t corrupt() const;
  std::string first_corrupt() const;
  // The most bytes the prefetch queue held at once.
  int64_t peak_prefetch_bytes() const { return prefetcher_->peak_bytes(); }

 private:
  // The next record, shuffled; false at the unit's end.
  absl::StatusOr<bool> NextRecord(RecordPrefetcher::Record* record);
  // Parses `record` into fields_ (text of the fields may point into it or
  // into example_fields_, until the next Parse).
  absl::Status Parse(const std::string& record);

  const DataSourceSpec& source_;
  const RowEncoder* const encoder_;
  const std::string path_;
  std::unique_ptr<RecordPrefetcher> prefetcher_;
  ShuffleBuffer<RecordPrefetcher::Record> shuffle_;
  bool input_done_ = false;
  CorruptRecords parse_errors_;
  std::vector<CsvField> fields_;
  ExampleFields example_fields_;  // tfrecord: the columns out of each tf.Example
};

// The seed of a streaming unit's shuffle buffer.
uint64_t StreamShuffleSeed(uint64_t job_seed, const DataSplit& split);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_STREAM_BATCHES_H_
