// Implementation of the IDX reader; see idx_reader.h for the format.
#include "common/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pscluster {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
// Bounds that reject garbage headers before any allocation: far above any
// real data set (MNIST is 60000 x 28 x 28) yet small enough to allocate.
constexpr int64_t kMaxCount = int64_t{1} << 28;
constexpr int64_t kMaxSide = 1 << 14;
constexpr int64_t kMaxBytes = int64_t{1} << 34;  // 16 GiB

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

absl::StatusOr<GzFile> Open(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno != 0 ? errno : ENOENT;
    return absl::NotFoundError(
        absl::StrCat("cannot open data file '", path, "': ", std::strerror(err)));
  }
  return GzFile(f);
}

// Reads exactly `n` bytes; INVALID_ARGUMENT naming `what` if the file ends
// early or zlib reports a corrupt stream.
absl::Status ReadExactly(gzFile f, const std::string& path, const char* what, void* out,
                         int64_t n) {
  auto* dst = static_cast<uint8_t*>(out);
  int64_t done = 0;
  while (done < n) {
    // gzread takes an unsigned int length; read in 1 GiB chunks.
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, int64_t{1} << 30));
    const int got = gzread(f, dst + done, chunk);
    if (got < 0) {
      int zerr = 0;
      const char* msg = gzerror(f, &zerr);
      return absl::InvalidArgumentError(absl::StrCat("data file '", path, "': corrupt ", what,
                                                     ": ", msg != nullptr ? msg : "read error"));
    }
    if (got == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "data file '%s' is truncated: %s needs %d bytes, file has only %d", path, what, n,
          done));
    }
    done += got;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ReadBigEndian32(gzFile f, const std::string& path, const char* what) {
  uint8_t b[4];
  RETURN_IF_ERROR(ReadExactly(f, path, what, b, 4));
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

absl::Status CheckMagic(uint32_t magic, uint32_t want, const std::string& path,
                        const char* kind) {
  if (magic == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "data file '%s' is not an IDX %s file: magic number 0x%08x, expected 0x%08x%s", path, kind,
      magic, want,
      (magic == kImagesMagic || magic == kLabelsMagic) ? " (images and labels swapped?)" : ""));
}

absl::Status CheckLimit(int64_t limit, const std::string& path) {
  if (limit >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("data file '", path, "': limit must be >= 0, got ", limit));
}

absl::Status CheckDim(int64_t value, int64_t max, const std::string& path, const char* name) {
  if (value >= 1 && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "data file '%s' has an absurd %s of %d (allowed 1..%d)", path, name, value, max));
}

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path, int64_t limit) {
  RETURN_IF_ERROR(CheckLimit(limit, path));
  ASSIGN_OR_RETURN(GzFile f, Open(path));
  ASSIGN_OR_RETURN(const uint32_t magic, ReadBigEndian32(f.get(), path, "header"));
  RETURN_IF_ERROR(CheckMagic(magic, kImagesMagic, path, "image"));
  ASSIGN_OR_RETURN(const int64_t count, ReadBigEndian32(f.get(), path, "header"));
  ASSIGN_OR_RETURN(const int64_t rows, ReadBigEndian32(f.get(), path, "header"));
  ASSIGN_OR_RETURN(const int64_t cols, ReadBigEndian32(f.get(), path, "header"));
  // A zero count is legal (an empty file); zero rows/cols is not.
  if (count != 0) RETURN_IF_ERROR(CheckDim(count, kMaxCount, path, "image count"));
  RETURN_IF_ERROR(CheckDim(rows, kMaxSide, path, "row count"));
  RETURN_IF_ERROR(CheckDim(cols, kMaxSide, path, "column count"));

  IdxImages images;
  images.count = (limit == 0 || limit > count) ? count : limit;
  images.rows = rows;
  images.cols = cols;
  const int64_t bytes = images.count * rows * cols;
  if (bytes > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data file '%s' asks for %d images of %dx%d (%d bytes), more than the %d allowed", path,
        images.count, rows, cols, bytes, kMaxBytes));
  }
  images.pixels.resize(static_cast<size_t>(bytes));
  RETURN_IF_ERROR(ReadExactly(f.get(), path, "image pixels", images.pixels.data(), bytes));
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, int64_t limit) {
  RETURN_IF_ERROR(CheckLimit(limit, path));
  ASSIGN_OR_RETURN(GzFile f, Open(path));
  ASSIGN_OR_RETURN(const uint32_t magic, ReadBigEndian32(f.get(), path, "header"));
  RETURN_IF_ERROR(CheckMagic(magic, kLabelsMagic, path, "label"));
  ASSIGN_OR_RETURN(const int64_t count, ReadBigEndian32(f.get(), path, "header"));
  if (count != 0) RETURN_IF_ERROR(CheckDim(count, kMaxCount, path, "label count"));
  const int64_t n = (limit == 0 || limit > count) ? count : limit;
  std::vector<uint8_t> labels(static_cast<size_t>(n));
  RETURN_IF_ERROR(ReadExactly(f.get(), path, "labels", labels.data(), n));
  return labels;
}

}  // namespace pscluster
