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
// Thread-safe (pure functions).
#ifndef PSCLUSTER_COMMON_TFRECORD_H_
#define PSCLUSTER_COMMON_TFRECORD_H_

#include <cstdint>
#include <string>

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

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_TFRECORD_H_
