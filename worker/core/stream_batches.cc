#include "worker/core/stream_batches.h"

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
      parse_errors_(source.stream.skip_corrupt ? CorruptRecordPolicy::kSkip
                                               : CorruptRecordPolicy::kFail),
      example_fields_(source.columns) {}

StreamBatches::~StreamBatches() = default;

int64_t StreamBatches::corrupt() const {
  return prefetcher_->skipped() + parse_errors_.skipped();
}

std::string StreamBatches::first_corrupt() const {
  // The reader's count is final only at the end; its messages come first
  // (they were met first in the file, before any record was parsed).
  const std::vector<std::string> read = prefetcher_->corrupt_messages();
  if (!read.empty()) return read.front();
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
  RecordPrefetcher::Record record;
  ASSIGN_OR_RETURN(const bool left, NextRecord(&record));
  if (left) {
    return absl::FailedPreconditionError(absl::StrCat(
        "file ", path_, ": record ", record.number, " of the unit was left unread"));
  }
  return absl::OkStatus();
}

absl::Status StreamBatches::Next(int64_t n, Dataset* batch) {
  *batch = encoder_->Empty();
  RecordPrefetcher::Record record;
  while (batch->count < n) {
    ASSIGN_OR_RETURN(const bool got, NextRecord(&record));
    if (!got) break;
    if (record.data.empty() && source_.format != "tfrecord") continue;  // a blank line
    absl::Status s = Parse(record.data);
    if (s.ok()) {
      absl::StatusOr<bool> added = encoder_->Append(fields_, batch);
      if (!added.ok()) s = added.status();
    }
    if (!s.ok()) {
      const std::string where =
          source_.format == "tfrecord"
              ? absl::StrCat("file ", path_, ", record ", record.number)
              : absl::StrCat("file ", path_, ", line ",
                             record.number + 1 + (source_.header ? 1 : 0));
      RETURN_IF_ERROR(parse_errors_.Handle(
          absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()))));
    }
  }
  return absl::OkStatus();
}

}  // namespace pscluster
