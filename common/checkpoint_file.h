// Checkpoint files on disk: framed records written atomically, and read back
// only after the whole file has been verified.
//
// A data file is a sequence of records, each [uint64 length][length bytes]
// with the length little-endian (docs/checkpoint_format.md). The writer
// appends records to "<path>.tmp.<pid>" and Commit() fsyncs it, renames it to
// `path` and fsyncs the directory, so `path` is either absent or complete.
// The file's identity is its size and its XXH3-64 checksum (16 lowercase hex
// digits), recorded by whoever commits the checkpoint (CheckpointFile in
// protos/ps.proto); a reader checks both before trusting a byte of it.
//
// No gRPC here; the PS (ps/core) writes data files with it and the
// coordinator its MANIFEST (WriteFileAtomically).
//
// Thread-safety: the free functions are thread-safe; a writer or reader is
// thread-compatible (one thread at a time).
#ifndef PSCLUSTER_COMMON_CHECKPOINT_FILE_H_
#define PSCLUSTER_COMMON_CHECKPOINT_FILE_H_

#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "protos/ps.pb.h"

namespace pscluster {

// Largest record a reader accepts (a frame claiming more is DATA_LOSS).
// Writers keep records well below it (the PS chunks at ~64 MiB).
inline constexpr uint64_t kMaxCheckpointRecordBytes = uint64_t{1} << 31;

// "0123456789abcdef": XXH3-64 as the checksum strings of CheckpointFile.
std::string ChecksumHex(uint64_t hash);

// Writes `contents` to "<path>.tmp.<pid>", fsyncs it, renames it to `path` and
// fsyncs the directory (the coordinator's MANIFEST). Returns size, checksum
// and, as the name, `path`. Errors as CheckpointFileWriter.
absl::StatusOr<CheckpointFile> WriteFileAtomically(const std::string& path,
                                                   absl::string_view contents);

class CheckpointFileWriter {
 public:
  // Whether Commit may replace a file already at `path`.
  enum class Existing { kReplace, kRefuse };

  // Creates "<path>.tmp.<pid>" (truncating a stale one).
  // INVALID_ARGUMENT for an empty path; ALREADY_EXISTS naming the file when
  // `existing` is kRefuse and `path` exists; otherwise the errno's code (e.g.
  // NOT_FOUND for a missing directory, PERMISSION_DENIED) naming the file.
  static absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> Create(
      const std::string& path, Existing existing = Existing::kReplace);

  // Removes the temporary file unless Commit() succeeded.
  ~CheckpointFileWriter();

  CheckpointFileWriter(const CheckpointFileWriter&) = delete;
  CheckpointFileWriter& operator=(const CheckpointFileWriter&) = delete;

  // Appends one framed record. Errors (the errno's code naming the file) are
  // sticky: every later call fails too.
  absl::Status Append(absl::string_view record);

  // Flushes and fsyncs the file, renames it to `path`, fsyncs the directory,
  // and returns size, checksum and, as the name, `path` (the PS replaces it by
  // the checkpoint name). With Existing::kRefuse the rename never replaces a
  // file (renameat2 RENAME_NOREPLACE, or link where the file system lacks
  // it): ALREADY_EXISTS if one appeared meanwhile. REQUIRES: called at most
  // once.
  absl::StatusOr<CheckpointFile> Commit();

 private:
  friend absl::StatusOr<CheckpointFile> WriteFileAtomically(const std::string& path,
                                                            absl::string_view contents);

  CheckpointFileWriter(std::string path, std::string temp_path, std::FILE* file,
                       Existing existing);
  absl::Status Write(const void* data, size_t size);

  const std::string path_;
  const std::string temp_path_;
  std::FILE* file_;
  XXH3_state_t* hash_;
  uint64_t bytes_ = 0;
  absl::Status status_;
  bool committed_ = false;
  const Existing existing_;
};

// OK if `path` holds exactly expected.bytes bytes whose XXH3-64 is
// expected.checksum (expected.name is not used: a checkpoint name is resolved
// to `path` by the caller). NOT_FOUND if it does not exist; DATA_LOSS naming
// the file and what differs (size or checksum); other I/O errors with the
// errno's code.
absl::Status VerifyCheckpointFile(const std::string& path, const CheckpointFile& expected);

// Reads the records of a file in order. Verify the file first: the reader
// only guards against frames that run past the end (never crashes on a bad
// file), not against flipped bits.
class CheckpointFileReader {
 public:
  // NOT_FOUND if the file does not exist; other errors with the errno's code.
  static absl::StatusOr<std::unique_ptr<CheckpointFileReader>> Open(const std::string& path);
  ~CheckpointFileReader();

  CheckpointFileReader(const CheckpointFileReader&) = delete;
  CheckpointFileReader& operator=(const CheckpointFileReader&) = delete;

  // Reads the next record into *record and returns true, or returns false at
  // the end of the file. DATA_LOSS naming the file for a torn frame (length
  // or payload cut short) or a length over kMaxCheckpointRecordBytes.
  absl::StatusOr<bool> Next(std::string* record);

  const std::string& path() const { return path_; }

 private:
  CheckpointFileReader(std::string path, std::FILE* file, uint64_t size);

  const std::string path_;
  std::FILE* file_;
  const uint64_t size_;
  uint64_t offset_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_CHECKPOINT_FILE_H_
