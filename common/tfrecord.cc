#include "common/tfrecord.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t ReadLittleEndian(const unsigned char* bytes, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= uint64_t{bytes[i]} << (8 * i);
  return v;
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

TfRecordReader::TfRecordReader(std::string path, uint64_t max_record_bytes)
    : path_(std::move(path)), max_record_bytes_(max_record_bytes) {}

TfRecordReader::~TfRecordReader() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TfRecordReader::Fail(absl::Status status) {
  failed_ = status;
  return status;
}

absl::Status TfRecordReader::Next(std::string* data) {
  recoverable_ = false;
  if (!failed_.ok()) return failed_;
  if (file_ == nullptr) {
    file_ = std::fopen(path_.c_str(), "rbe");
    if (file_ == nullptr) {
      return Fail(absl::NotFoundError(
          absl::StrCat("TFRecord file ", path_, ": cannot open: ", std::strerror(errno))));
    }
    if (offset_ > 0 && fseeko(file_, static_cast<off_t>(offset_), SEEK_SET) != 0) {
      return Fail(absl::NotFoundError(absl::StrCat("TFRecord file ", path_, ": cannot seek to byte ",
                                                   offset_, ": ", std::strerror(errno))));
    }
  }
  const auto where = [this] { return absl::StrCat("TFRecord file ", path_, ", record at byte ", offset_, ": "); };
  unsigned char head[12];
  const size_t got = std::fread(head, 1, sizeof(head), file_);
  if (got == 0 && std::feof(file_)) return absl::OutOfRangeError(absl::StrCat("end of ", path_));
  if (got != sizeof(head)) {
    return Fail(absl::DataLossError(absl::StrCat(where(), "the file ends inside the record's "
                                                          "length (",
                                                 got, " of 12 bytes)")));
  }
  const uint64_t length = ReadLittleEndian(head, 8);
  const uint32_t length_crc = static_cast<uint32_t>(ReadLittleEndian(head + 8, 4));
  if (MaskCrc32c(Crc32c(absl::string_view(reinterpret_cast<char*>(head), 8))) != length_crc) {
    return Fail(absl::DataLossError(absl::StrCat(where(), "length CRC mismatch")));
  }
  if (length > max_record_bytes_) {
    return Fail(absl::DataLossError(absl::StrCat(where(), "length ", length, " is over the limit of ",
                                                 max_record_bytes_, " bytes")));
  }
  data->resize(length);
  unsigned char tail[4];
  if (std::fread(data->data(), 1, length, file_) != length ||
      std::fread(tail, 1, sizeof(tail), file_) != sizeof(tail)) {
    return Fail(absl::DataLossError(absl::StrCat(where(), "the file ends inside the record (",
                                                 length, " data bytes announced)")));
  }
  const uint64_t at = offset_;
  offset_ += kTfRecordOverheadBytes + length;
  if (MaskCrc32c(Crc32c(*data)) != static_cast<uint32_t>(ReadLittleEndian(tail, 4))) {
    recoverable_ = true;
    return absl::DataLossError(
        absl::StrCat("TFRecord file ", path_, ", record at byte ", at, ": data CRC mismatch"));
  }
  return absl::OkStatus();
}

}  // namespace pscluster
