#include "worker/core/record_stream.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tfrecord.h"

namespace pscluster {
namespace {

constexpr size_t kReadChunkBytes = 64 << 10;

absl::Status Prefixed(absl::string_view where, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

}  // namespace

absl::StatusOr<RecordFormat> ParseRecordFormat(absl::string_view name) {
  if (name == "lines") return RecordFormat::kLines;
  if (name == "tfrecord") return RecordFormat::kTfRecord;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown record format '", name, "' (lines or tfrecord)"));
}

struct RecordFileReader::Files {
  gzFile gz = nullptr;
  std::string buffer;  // lines: read, not yet returned, from `pos`
  size_t pos = 0;
  bool eof = false;
  std::unique_ptr<TfRecordReader> tfrecord;
  absl::Status failed;  // framing lost, or the file could not be opened

  ~Files() {
    if (gz != nullptr) gzclose(gz);
  }
};

RecordFileReader::RecordFileReader(std::string path, RecordReaderOptions options)
    : path_(std::move(path)), options_(options) {}

RecordFileReader::~RecordFileReader() = default;

std::string RecordFileReader::Where() const {
  if (options_.format == RecordFormat::kLines) return absl::StrCat("file ", path_, ", line ", line_);
  return absl::StrCat("file ", path_, ", record at byte ", byte_offset_);
}

void RecordFileReader::StartAt(int64_t byte_offset, int64_t index) {
  start_offset_ = byte_offset;
  index_ = index;
  // Numbered as if read from the start: the header (if any) was line 1.
  line_ = index + (options_.header ? 1 : 0);
  header_skipped_ = true;
  byte_offset_ = static_cast<uint64_t>(byte_offset);
}

absl::Status RecordFileReader::Next(std::string* record) {
  recoverable_ = false;
  if (files_ == nullptr) {
    files_ = std::make_unique<Files>();
    if (options_.format == RecordFormat::kTfRecord) {
      files_->tfrecord = std::make_unique<TfRecordReader>(
          path_, static_cast<uint64_t>(std::max<int64_t>(options_.max_record_bytes, 0)));
      files_->tfrecord->StartAt(static_cast<uint64_t>(start_offset_));
    } else {
      files_->gz = gzopen(path_.c_str(), "rb");
      if (files_->gz == nullptr) {
        files_->failed = absl::NotFoundError(
            absl::StrCat("data file ", path_, ": cannot open: ", std::strerror(errno)));
      } else {
        gzbuffer(files_->gz, 256 << 10);
        // A plain file seeks; a gzip one would be decompressed up to the
        // offset (the planner sends no offset for gzip files).
        if (start_offset_ > 0 && gzseek(files_->gz, start_offset_, SEEK_SET) != start_offset_) {
          files_->failed = absl::DataLossError(absl::StrCat(
              "data file ", path_, ": cannot seek to byte ", start_offset_, " (changed since it "
              "was indexed?)"));
        }
      }
    }
  }
  if (!files_->failed.ok()) return files_->failed;
  if (options_.format == RecordFormat::kTfRecord) return NextTfRecord(record);
  if (options_.header && !header_skipped_) {
    header_skipped_ = true;
    absl::Status s = NextLine(record);
    if (!s.ok() && !(absl::IsDataLoss(s) && recoverable_)) return s;
    recoverable_ = false;
  }
  absl::Status s = NextLine(record);
  if (s.ok() || (absl::IsDataLoss(s) && recoverable_)) ++index_;
  return s;
}

absl::Status RecordFileReader::NextTfRecord(std::string* record) {
  absl::Status s = files_->tfrecord->Next(record);
  if (s.ok()) {
    byte_offset_ = files_->tfrecord->offset() - kTfRecordOverheadBytes - record->size();
    ++index_;
    return s;
  }
  if (absl::IsDataLoss(s) && files_->tfrecord->recoverable()) {
    recoverable_ = true;
    ++index_;
    return s;
  }
  byte_offset_ = files_->tfrecord->offset();
  if (!absl::IsOutOfRange(s)) files_->failed = s;
  return s;
}

absl::Status RecordFileReader::NextLine(std::string* record) {
  Files& f = *files_;
  bool too_long = false;
  for (;;) {
    const size_t newline = f.buffer.find('\n', f.pos);
    if (newline != std::string::npos || f.eof) {
      const size_t end = newline == std::string::npos ? f.buffer.size() : newline;
      if (end == f.pos && newline == std::string::npos) {
        if (too_long) break;  // the over-long last line ended with the file
        return absl::OutOfRangeError(absl::StrCat("end of ", path_));
      }
      ++line_;
      if (too_long || static_cast<int64_t>(end - f.pos) > options_.max_record_bytes) {
        f.pos = newline == std::string::npos ? f.buffer.size() : newline + 1;
        recoverable_ = true;
        return absl::DataLossError(absl::StrCat(Where(), ": longer than the limit of ",
                                                options_.max_record_bytes, " bytes"));
      }
      record->assign(f.buffer, f.pos, end - f.pos);
      if (!record->empty() && record->back() == '\r') record->pop_back();
      f.pos = newline == std::string::npos ? f.buffer.size() : newline + 1;
      return absl::OkStatus();
    }
    // No newline yet: an over-long line is dropped as it streams by.
    if (static_cast<int64_t>(f.buffer.size() - f.pos) > options_.max_record_bytes) {
      too_long = true;
      f.pos = f.buffer.size();
    }
    f.buffer.erase(0, f.pos);
    f.pos = 0;
    const size_t old = f.buffer.size();
    f.buffer.resize(old + kReadChunkBytes);
    const int n = gzread(f.gz, f.buffer.data() + old, kReadChunkBytes);
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(f.gz, &code);
      f.failed = absl::DataLossError(absl::StrCat("file ", path_, ", after line ", line_,
                                                  ": unreadable (", message, ")"));
      return f.failed;
    }
    f.buffer.resize(old + static_cast<size_t>(n));
    if (n == 0) {
      f.eof = true;
      // A gzip stream that stops mid-member reads as an early end.
      int code = 0;
      const char* message = gzerror(f.gz, &code);
      if (code != Z_OK && code != Z_STREAM_END) {
        f.failed = absl::DataLossError(absl::StrCat("file ", path_, ", after line ", line_,
                                                    ": truncated or corrupt (", message, ")"));
        return f.failed;
      }
    }
  }
  ++line_;
  recoverable_ = true;
  return absl::DataLossError(absl::StrCat(Where(), ": longer than the limit of ",
                                          options_.max_record_bytes, " bytes"));
}

absl::Status CorruptRecords::Handle(const absl::Status& error) {
  if (policy_ == CorruptRecordPolicy::kFail) return error;
  ++skipped_;
  if (messages_.size() < kKeptMessages) messages_.emplace_back(error.message());
  return absl::OkStatus();
}

absl::Status CorruptRecords::HandleLostRest(const absl::Status& error) {
  if (policy_ == CorruptRecordPolicy::kFail) return error;
  ++truncated_files_;
  if (messages_.size() < kKeptMessages) {
    messages_.push_back(absl::StrCat(error.message(), " (the rest of the file is lost)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RangeResult> ReadRecordRange(
    const RecordRange& range, const RecordReaderOptions& options, CorruptRecords* corrupt,
    const std::function<absl::Status(int64_t, absl::string_view)>& on_record) {
  RecordFileReader reader(range.path, options);
  if (range.offset > 0) reader.StartAt(range.offset, range.begin);
  RangeResult result;
  std::string record;
  while (range.end < 0 || reader.index() < range.end) {
    const int64_t number = reader.index();
    absl::Status s = reader.Next(&record);
    if (absl::IsOutOfRange(s)) {
      result.end_of_file = true;
      break;
    }
    const bool mine = number >= range.begin;
    if (absl::IsDataLoss(s) && reader.recoverable()) {
      if (mine) {
        if (absl::Status handled = corrupt->Handle(s); !handled.ok()) return handled;
      }
      continue;
    }
    if (absl::IsDataLoss(s)) {  // framing lost: nothing after it can be read
      if (absl::Status handled = corrupt->HandleLostRest(s); !handled.ok()) return handled;
      result.end_of_file = true;
      break;
    }
    if (!s.ok()) return s;
    if (!mine) continue;
    absl::Status taken = on_record(number, record);
    if (absl::IsInvalidArgument(taken) || absl::IsDataLoss(taken)) {
      if (absl::Status handled = corrupt->Handle(Prefixed(reader.Where(), taken)); !handled.ok()) {
        return handled;
      }
      continue;
    }
    if (!taken.ok()) return taken;
    ++result.records;
  }
  return result;
}

RecordPrefetcher::RecordPrefetcher(std::vector<RecordRange> ranges, RecordReaderOptions options,
                                   CorruptRecordPolicy policy, int64_t max_bytes)
    : ranges_(std::move(ranges)), options_(options), policy_(policy), max_bytes_(max_bytes) {
  reader_ = std::thread([this] { ReadAll(); });
}

RecordPrefetcher::~RecordPrefetcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  reader_.join();
}

bool RecordPrefetcher::HasRoom() const {
  // A record larger than the whole budget goes alone.
  return stopping_ || queue_.empty() || queued_bytes_ + incoming_bytes_ <= max_bytes_;
}

void RecordPrefetcher::ReadAll() {
  // Counted without the lock (the consumer never waits on it while reading),
  // published at the end.
  CorruptRecords corrupt(policy_);
  absl::Status status;
  for (size_t r = 0; r < ranges_.size() && status.ok(); ++r) {
    absl::StatusOr<RangeResult> read = ReadRecordRange(
        ranges_[r], options_, &corrupt, [&](int64_t number, absl::string_view data) {
          absl::MutexLock lock(&mu_);
          incoming_bytes_ = static_cast<int64_t>(data.size());
          mu_.Await(absl::Condition(this, &RecordPrefetcher::HasRoom));
          if (stopping_) return absl::CancelledError("prefetch stopped");
          queue_.push_back(Record{static_cast<int64_t>(r), number, std::string(data)});
          queued_bytes_ += incoming_bytes_;
          peak_bytes_ = std::max(peak_bytes_, queued_bytes_);
          return absl::OkStatus();
        });
    if (!read.ok()) status = read.status();
  }
  absl::MutexLock lock(&mu_);
  skipped_ = corrupt.skipped() + corrupt.truncated_files();
  messages_ = corrupt.messages();
  status_ = absl::IsCancelled(status) && stopping_ ? absl::OkStatus() : status;
  done_ = true;
}

absl::Status RecordPrefetcher::Next(Record* record) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](RecordPrefetcher* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return !p->queue_.empty() || p->done_;
      },
      this));
  if (queue_.empty()) {
    return status_.ok() ? absl::OutOfRangeError("no more records") : status_;
  }
  *record = std::move(queue_.front());
  queue_.pop_front();
  queued_bytes_ -= static_cast<int64_t>(record->data.size());
  return absl::OkStatus();
}

int64_t RecordPrefetcher::skipped() {
  absl::MutexLock lock(&mu_);
  return skipped_;
}

std::vector<std::string> RecordPrefetcher::corrupt_messages() {
  absl::MutexLock lock(&mu_);
  return messages_;
}

int64_t RecordPrefetcher::peak_bytes() {
  absl::MutexLock lock(&mu_);
  return peak_bytes_;
}

}  // namespace pscluster
