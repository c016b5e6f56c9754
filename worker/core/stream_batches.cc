#include "worker/core/stream_batches.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/core/features.h"

namespace pscluster {
namespace {

std::vector<RecordRange> RangeOf(const DataSplit& split) {
  RecordRange r;
  r.path = split.path();
  r.begin = split.begin();
  r.end = split.end();
  r.offset = split.byte_offset();
  return {r};
}

RecordReaderOptions ReaderOptions(const DataSourceSpec& source) {
  RecordReaderOptions o;
  o.format = source.format == "tfrecord" ? RecordFormat::kTfRecord : RecordFormat::kLines;
  o.header = source.format != "tfrecord" && source.header;
  return o;
}

}  // namespace

uint64_t StreamShuffleSeed(uint64_t job_seed, const DataSplit& split) {
  // XXH3 (features.h): the same in every process, so a retried closure,
  // wherever it runs, shuffles its unit alike.
  return HashStringValue(job_seed,
                         absl::StrCat(split.epoch(), ":", split.path(), ":", split.begin()));
}

StreamBatches::StreamBatches(const DataSourceSpec& source, const RowEncoder* encoder,
                             const DataSplit& split, uint64_t seed, bool shuffle)
    : source_(source),
      encoder_(encoder),
      path_(split.path()),
      prefetcher_(std::make_unique<RecordPrefetcher>(
          RangeOf(split), ReaderOptions(source),
          source.stream.skip_corrupt ? CorruptRecordPolicy::kSkip : CorruptRecordPolicy::kFail,
          source.stream.prefetch_bytes)),
      shuffle_(shuffle ? static_cast<size_t>(source.stream.shuffle_buffer) : 0,
               StreamShuffleSeed(seed, split)),
      example_fields_(source.columns),
      parse_errors_(source.stream.skip_corrupt ? CorruptRecordPolicy::kSkip
                                               : CorruptRecordPolicy::kFail) {}

StreamBatches::~StreamBatches() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (parser_.joinable()) parser_.join();
}

int64_t StreamBatches::corrupt() const {
  absl::MutexLock lock(&mu_);
  return prefetcher_->skipped() + parse_errors_.skipped();
}

std::string StreamBatches::first_corrupt() const {
  // The reader's count is final only at the end; its messages come first
  // (they were met first in the file, before any record was parsed).
  const std::vector<std::string> read = prefetcher_->corrupt_messages();
  if (!read.empty()) return read.front();
  absl::MutexLock lock(&mu_);
  return parse_errors_.messages().empty() ? std::string() : parse_errors_.messages().front();
}

absl::StatusOr<bool> StreamBatches::NextRecord(RecordPrefetcher::Record* record) {
  while (!input_done_) {
    RecordPrefetcher::Record in;
    const absl::Status s = prefetcher_->Next(&in);
    if (absl::IsOutOfRange(s)) {
      input_done_ = true;
      break;
    }
    if (!s.ok()) return s;
    if (shuffle_.Push(std::move(in), record)) return true;
  }
  return shuffle_.Pop(record);
}

absl::Status StreamBatches::Parse(const std::string& record) {
  if (source_.format != "tfrecord") {
    return ParseCsvLine(record, source_.columns, source_.delimiter, &fields_);
  }
  return example_fields_.Read(record, &fields_);
}

absl::Status StreamBatches::Finish() {
  bool started;
  {
    absl::MutexLock lock(&mu_);
    started = batch_size_ > 0;
  }
  if (!started) {
    // Nothing was asked for (no parser): the unit must hold no record.
    RecordPrefetcher::Record record;
    ASSIGN_OR_RETURN(const bool left, NextRecord(&record));
    if (left) {
      return absl::FailedPreconditionError(
          absl::StrCat("file ", path_, ": record ", record.number, " of the unit was left unread"));
    }
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](StreamBatches* s)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->parsed_all_ || !s->ready_.empty(); },
      this));
  if (!ready_.empty()) {  // the parser queues no empty batch
    return absl::FailedPreconditionError(
        absl::StrCat("file ", path_, ": ", ready_.front().count,
                     " or more examples of the unit were left unread"));
  }
  return absl::IsOutOfRange(parse_status_) ? absl::OkStatus() : parse_status_;
}

absl::Status StreamBatches::Next(int64_t n, Dataset* batch) {
  absl::MutexLock lock(&mu_);
  if (batch_size_ == 0) {
    batch_size_ = std::max<int64_t>(n, 1);
    parser_ = std::thread([this] { ParseLoop(); });
  }
  mu_.Await(absl::Condition(
      +[](StreamBatches* s)
           ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->parsed_all_ || !s->ready_.empty(); },
      this));
  if (ready_.empty()) {
    // The parser ended with every batch taken.
    if (!absl::IsOutOfRange(parse_status_)) return parse_status_;
    *batch = encoder_->Empty();
    return absl::OkStatus();
  }
  if (n != batch_size_ && ready_.front().count > n) {
    return absl::FailedPreconditionError(
        absl::StrCat("file ", path_, ": ", n, " examples asked of a stream of batches of ",
                     batch_size_, ", with ", ready_.front().count, " ready"));
  }
  *batch = std::move(ready_.front());
  ready_.pop_front();
  return absl::OkStatus();
}

void StreamBatches::ParseLoop() {
  for (;;) {
    Dataset batch;
    const absl::Status s = Fill(batch_size_, &batch);
    const bool end = s.ok() && batch.count < batch_size_;
    absl::MutexLock lock(&mu_);
    if (!s.ok()) {
      parse_status_ = s;
      parsed_all_ = true;
      return;
    }
    if (batch.count > 0) ready_.push_back(std::move(batch));
    if (end) {
      parse_status_ = absl::OutOfRangeError("the unit's end");
      parsed_all_ = true;
      return;
    }
    mu_.Await(absl::Condition(
        +[](StreamBatches* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return s->stop_ || s->ready_.size() < kBatchesAhead;
        },
        this));
    if (stop_) return;
  }
}

absl::Status StreamBatches::Fill(int64_t n, Dataset* batch) {
  *batch = encoder_->Empty();
  RecordPrefetcher::Record record;
  while (batch->count < n) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return absl::CancelledError("the stream was closed");
    }
    ASSIGN_OR_RETURN(const bool got, NextRecord(&record));
    if (!got) break;
    if (record.data.empty() && source_.format != "tfrecord") continue;  // a blank line
    absl::Status s = Parse(record.data);
    if (s.ok()) {
      absl::StatusOr<bool> added = encoder_->Append(fields_, batch);
      if (!added.ok()) s = added.status();
    }
    if (!s.ok()) {
      const std::string where = source_.format == "tfrecord"
                                    ? absl::StrCat("file ", path_, ", record ", record.number)
                                    : absl::StrCat("file ", path_, ", line ",
                                                   record.number + 1 + (source_.header ? 1 : 0));
      absl::MutexLock lock(&mu_);
      RETURN_IF_ERROR(
          parse_errors_.Handle(absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()))));
    }
  }
  return absl::OkStatus();
}

}  // namespace pscluster
