// TFRecord framing, the container of TensorBoard event files (and of TF's
// .tfrecord files): each record is
//
//   uint64 length (little-endian)
//   uint32 masked CRC32C of those 8 length bytes (little-endian)
//   `length` bytes of data
//   uint32 masked CRC32C of the data (little-endian)
//
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32),
// as tensorflow/core/lib/hash/crc32c.h masks it. CRC32C (Castagnoli, the
// iSCSI polynomial) comes from ISA-L's crc32_iscsi (libisal-dev), not from
// code of our own.
//
// Thread-safe (pure functions), except TfRecordReader: thread-compatible.
#ifndef PSCLUSTER_COMMON_TFRECORD_H_
#define PSCLUSTER_COMMON_TFRECORD_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pscluster {

// Bytes a record adds around its data: length, its CRC, the data's CRC.
inline constexpr size_t kTfRecordOverheadBytes = 8 + 4 + 4;

// The standard CRC32C of `data` (Crc32c("123456789") == 0xE3069283).
uint32_t Crc32c(absl::string_view data);

// TFRecord's masked form of a CRC32C.
uint32_t MaskCrc32c(uint32_t crc);

// `data` framed as one TFRecord (kTfRecordOverheadBytes + data.size() bytes).
std::string FrameTfRecord(absl::string_view data);

// Reads the records of one TFRecord file in order, checking both CRCs of
// each. Memory: one record at a time.
class TfRecordReader {
 public:
  // Records longer than `max_record_bytes` are refused (DATA_LOSS) before
  // anything is allocated for them: a corrupt length never allocates GBs.
  explicit TfRecordReader(std::string path, uint64_t max_record_bytes = uint64_t{64} << 20);
  ~TfRecordReader();
  TfRecordReader(const TfRecordReader&) = delete;
  TfRecordReader& operator=(const TfRecordReader&) = delete;

  // The next record's data into `*data`. OUT_OF_RANGE at the file's clean
  // end; NOT_FOUND if the file cannot be opened; DATA_LOSS naming the file
  // and the record's byte offset for a bad length CRC, a bad data CRC, an
  // oversized length or a file that ends inside a record.
  // A bad data CRC is recoverable (recoverable() true): the length was
  // checked, so the reader has stepped over the record and the next call
  // reads the one after. After any other error the framing is lost and the
  // reader stays failed.
  absl::Status Next(std::string* data);

  // Starts reading at byte `offset`, which must be a record's start (from an
  // index, common/record_index.h). REQUIRES: before the first Next.
  void StartAt(uint64_t offset) { offset_ = offset; }

  // Whether the last DATA_LOSS left the reader able to go on.
  bool recoverable() const { return recoverable_; }

  // Byte offset of the next record (of the failed one, after an error that
  // is not recoverable).
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  absl::Status Fail(absl::Status status);

  const std::string path_;
  const uint64_t max_record_bytes_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
  bool recoverable_ = false;
  absl::Status failed_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TFRECORD_H_
