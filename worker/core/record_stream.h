// Streaming records from data files larger than memory (issue 24's input
// layer): the records of one file read in order, a closure's share of a
// file named as a record range, corrupt records handled by policy, a
// bounded prefetch queue and a seeded shuffle buffer.
//
// Formats:
//  - lines: text files of one record per line (CSV, TSV, Criteo's layout),
//    plain or gzip (zlib's gzread reads both); a trailing '\r' is dropped;
//  - tfrecord: TFRecord files (common/tfrecord.h), both CRC32Cs checked.
//
// Record numbers are positions in the file, corrupt records included, so a
// range [begin, end) names the same records in every process and on every
// retry. A corrupt record (a TFRecord whose data CRC fails, a line over the
// size limit, a record the caller's parser refuses) is skipped and counted
// or fails the read, as CorruptRecordPolicy says, always named by file and
// line or byte offset. A TFRecord file whose framing is lost (a bad length
// CRC, a file that ends inside a record) cannot be read past that point:
// under kSkip the rest of the file is reported as lost, with its offset,
// never dropped silently.
//
// Jobs read streaming sources through stream_batches.h (one closure's
// unit at a time); LoadDataset (dataset.h) loads the in-memory ones.
//
// Thread-safety: RecordFileReader, CorruptRecords and ShuffleBuffer are
// thread-compatible; RecordPrefetcher is thread-safe (one consumer).
#ifndef PSCLUSTER_WORKER_CORE_RECORD_STREAM_H_
#define PSCLUSTER_WORKER_CORE_RECORD_STREAM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace pscluster {

enum class RecordFormat { kLines, kTfRecord };
enum class CorruptRecordPolicy { kFail, kSkip };

// "lines" or "tfrecord"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<RecordFormat> ParseRecordFormat(absl::string_view name);

struct RecordReaderOptions {
  RecordFormat format = RecordFormat::kLines;
  // A longer record is corrupt (a line: skipped to its newline; a TFRecord
  // length: framing lost). Nothing larger is ever allocated.
  int64_t max_record_bytes = int64_t{1} << 20;
  // lines: the first line is a header, not a record.
  bool header = false;
};

// The records of one file, in order. Opening is lazy (the first Next).
class RecordFileReader {
 public:
  RecordFileReader(std::string path, RecordReaderOptions options);
  ~RecordFileReader();
  RecordFileReader(const RecordFileReader&) = delete;
  RecordFileReader& operator=(const RecordFileReader&) = delete;

  // The next record into `*record`. OUT_OF_RANGE at the end; NOT_FOUND if
  // the file cannot be opened; DATA_LOSS for a corrupt record, naming it —
  // recoverable() then says whether reading can go on past it (the record
  // still took its number).
  absl::Status Next(std::string* record);
  bool recoverable() const { return recoverable_; }

  // Starts at record `index`, which begins at byte `byte_offset` of the
  // (uncompressed) file, as an index found it (common/record_index.h)
  // instead of reading the records before it. REQUIRES: before the first
  // Next.
  void StartAt(int64_t byte_offset, int64_t index);

  // The number of the next record (records so far, corrupt ones included).
  int64_t index() const { return index_; }
  // Where the last record returned (or refused) lies: "file F, line L" or
  // "file F, record at byte B".
  std::string Where() const;
  const std::string& path() const { return path_; }

 private:
  absl::Status NextLine(std::string* record);
  absl::Status NextTfRecord(std::string* record);

  const std::string path_;
  const RecordReaderOptions options_;
  struct Files;
  std::unique_ptr<Files> files_;
  int64_t index_ = 0;
  int64_t line_ = 0;         // lines: the last line's number (1-based)
  uint64_t byte_offset_ = 0;  // tfrecord: the last record's offset
  bool recoverable_ = false;
  bool header_skipped_ = false;
  int64_t start_offset_ = 0;  // StartAt's byte offset; 0: the file's start
};

// Applies a CorruptRecordPolicy: under kSkip counts each corrupt record and
// keeps the first few messages; under kFail hands the error back.
class CorruptRecords {
 public:
  explicit CorruptRecords(CorruptRecordPolicy policy) : policy_(policy) {}

  // OK if `error` (naming the record) is skipped under the policy, else
  // `error` itself.
  absl::Status Handle(const absl::Status& error);
  // Records lost with the rest of a file whose framing is lost (skip only).
  absl::Status HandleLostRest(const absl::Status& error);

  int64_t skipped() const { return skipped_; }
  // Files whose rest was lost.
  int64_t truncated_files() const { return truncated_files_; }
  // The first kKeptMessages messages, for the job's status and logs.
  const std::vector<std::string>& messages() const { return messages_; }

  static constexpr int kKeptMessages = 10;

 private:
  const CorruptRecordPolicy policy_;
  int64_t skipped_ = 0;
  int64_t truncated_files_ = 0;
  std::vector<std::string> messages_;
};

// A closure's share of one file: records [begin, end) (end < 0: to the
// file's end). `offset` > 0: record `begin` starts at that byte (from an
// index), and the reader seeks there instead of reading the records before.
struct RecordRange {
  std::string path;
  int64_t begin = 0;
  int64_t end = -1;
  int64_t offset = 0;
};

struct RangeResult {
  int64_t records = 0;       // handed to the callback and accepted
  bool end_of_file = false;  // the file ended before `end`
};

// Reads `range` of its file and hands each record to `on_record(number,
// record)`. A corrupt record, or an INVALID_ARGUMENT / DATA_LOSS from
// `on_record` (a record its parser refuses; the message is prefixed with
// where the record lies), goes to `corrupt`. Records before `begin` are
// read and dropped (they are another closure's; their corruption is that
// closure's to count). Other errors from `on_record` end the read.
absl::StatusOr<RangeResult> ReadRecordRange(
    const RecordRange& range, const RecordReaderOptions& options, CorruptRecords* corrupt,
    const std::function<absl::Status(int64_t, absl::string_view)>& on_record);

// Reads ranges on a thread of its own into a queue bounded in bytes, so
// that reading overlaps training while memory stays bounded: at most
// `max_bytes` of records wait (or one record, if a single one is larger).
class RecordPrefetcher {
 public:
  struct Record {
    int64_t range = 0;   // index into the ranges given
    int64_t number = 0;  // the record's number in its file
    std::string data;
  };

  RecordPrefetcher(std::vector<RecordRange> ranges, RecordReaderOptions options,
                   CorruptRecordPolicy policy, int64_t max_bytes);
  // Stops the reader thread (it may be blocked on a full queue) and joins it.
  ~RecordPrefetcher();
  RecordPrefetcher(const RecordPrefetcher&) = delete;
  RecordPrefetcher& operator=(const RecordPrefetcher&) = delete;

  // The next record in range order. OUT_OF_RANGE after the last one; the
  // read's error (NOT_FOUND, DATA_LOSS under kFail) once the records before
  // it are taken.
  absl::Status Next(Record* record);

  // Counts of the reader's CorruptRecords, final once Next returned
  // OUT_OF_RANGE or an error.
  int64_t skipped() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> corrupt_messages() ABSL_LOCKS_EXCLUDED(mu_);
  // The most bytes of records ever queued at once.
  int64_t peak_bytes() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ReadAll();
  // Whether the record of incoming_bytes_ may be queued now.
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<RecordRange> ranges_;
  const RecordReaderOptions options_;
  const CorruptRecordPolicy policy_;
  const int64_t max_bytes_;
  absl::Mutex mu_;
  std::deque<Record> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t incoming_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  int64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> messages_ ABSL_GUARDED_BY(mu_);
  std::thread reader_;
};

// TF's Dataset.shuffle(buffer_size, seed): a buffer of up to `capacity`
// elements; once full, each new element takes the place of a uniformly
// chosen one, which comes out. The same seed and input give the same order.
template <typename T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(size_t capacity, uint64_t seed) : capacity_(capacity), rng_(seed) {
    buffer_.reserve(capacity);
  }

  // Adds `value`; true with an element in `*out` once the buffer is full.
  bool Push(T value, T* out) {
    if (buffer_.size() < capacity_) {
      buffer_.push_back(std::move(value));
      return false;
    }
    if (capacity_ == 0) {
      *out = std::move(value);
      return true;
    }
    const size_t i = std::uniform_int_distribution<size_t>(0, capacity_ - 1)(rng_);
    *out = std::move(buffer_[i]);
    buffer_[i] = std::move(value);
    return true;
  }

  // At the input's end: the rest, one at a time in random order; false when
  // empty.
  bool Pop(T* out) {
    if (buffer_.empty()) return false;
    const size_t i = std::uniform_int_distribution<size_t>(0, buffer_.size() - 1)(rng_);
    *out = std::move(buffer_[i]);
    buffer_[i] = std::move(buffer_.back());
    buffer_.pop_back();
    return true;
  }

  size_t size() const { return buffer_.size(); }

 private:
  const size_t capacity_;
  std::mt19937_64 rng_;
  std::vector<T> buffer_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_RECORD_STREAM_H_
