#include "common/tfrecord.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace pscluster {
namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  // ISA-L's crc32_iscsi neither inverts its seed nor its result: the
  // standard CRC32C starts from ~0 and inverts at the end. Its length is an
  // int, so long inputs go in chunks (the CRC carries over uninverted).
  unsigned int crc = 0xffffffffu;
  while (!data.empty()) {
    const size_t n = std::min<size_t>(data.size(), INT_MAX);
    crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data.data())),
                      static_cast<int>(n), crc);
    data.remove_prefix(n);
  }
  return ~crc;
}

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string FrameTfRecord(absl::string_view data) {
  std::string out;
  out.reserve(kTfRecordOverheadBytes + data.size());
  AppendLittleEndian(data.size(), 8, &out);
  AppendLittleEndian(MaskCrc32c(Crc32c(out)), 4, &out);
  out.append(data.data(), data.size());
  AppendLittleEndian(MaskCrc32c(Crc32c(data)), 4, &out);
  return out;
}

}  // namespace pscluster
