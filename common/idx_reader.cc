// Implementation of the IDX reader; see idx_reader.h for the format.
#include "common/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

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
// early or zlib reports a corrupt stream. `before` bytes of `what`, which
// has `total` bytes in all (0: n), were read already (for the message).
absl::Status ReadExactly(gzFile f, const std::string& path, const char* what, void* out,
                         int64_t n, int64_t before = 0, int64_t total = 0) {
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
          "data file '%s' is truncated: %s needs %d bytes, file has only %d", path, what,
          total > 0 ? total : n, before + done));
    }
    done += got;
  }
  return absl::OkStatus();
}

// Reads exactly `n` bytes into `out`, growing it as they arrive (64 MiB at a
// time), so that a header claiming more than the file holds fails with
// "truncated" having allocated about the file's size, not the up to
// kMaxBytes its header asks for. Errors as ReadExactly.
absl::Status ReadInto(gzFile f, const std::string& path, const char* what, int64_t n,
                      std::vector<uint8_t>* out) {
  constexpr int64_t kStep = int64_t{1} << 26;
  out->clear();
  while (static_cast<int64_t>(out->size()) < n) {
    const int64_t done = static_cast<int64_t>(out->size());
    const int64_t chunk = std::min(n - done, kStep);
    out->resize(static_cast<size_t>(done + chunk));
    RETURN_IF_ERROR(ReadExactly(f, path, what, out->data() + done, chunk, done, n));
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
  // Never the bytes found: the file may be anything (a job naming a file
  // that is not its data must not learn what the file holds).
  return absl::InvalidArgumentError(absl::StrFormat(
      "data file '%s' is not an IDX %s file: bytes 0..3 are not the magic number 0x%08x%s", path,
      kind, want,
      (magic == kImagesMagic || magic == kLabelsMagic) ? " (images and labels swapped?)" : ""));
}

absl::Status CheckLimit(int64_t limit, const std::string& path) {
  if (limit >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("data file '", path, "': limit must be >= 0, got ", limit));
}

// `offset`: where the header field lies (named in the message; its value
// is not).
absl::Status CheckDim(int64_t value, int64_t max, const std::string& path, const char* name,
                      int offset) {
  if (value >= 1 && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("data file '%s' has an absurd %s (header bytes %d..%d; allowed 1..%d)", path,
                      name, offset, offset + 3, max));
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
  if (count != 0) RETURN_IF_ERROR(CheckDim(count, kMaxCount, path, "image count", 4));
  RETURN_IF_ERROR(CheckDim(rows, kMaxSide, path, "row count", 8));
  RETURN_IF_ERROR(CheckDim(cols, kMaxSide, path, "column count", 12));

  IdxImages images;
  images.count = (limit == 0 || limit > count) ? count : limit;
  images.rows = rows;
  images.cols = cols;
  const int64_t bytes = images.count * rows * cols;
  if (bytes > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "data file '%s': its header (bytes 4..15) asks for more than the %d bytes of images "
        "allowed (set data.*.limit to read fewer)",
        path, kMaxBytes));
  }
  RETURN_IF_ERROR(ReadInto(f.get(), path, "image pixels", bytes, &images.pixels));
  return images;
}

absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path, int64_t limit) {
  RETURN_IF_ERROR(CheckLimit(limit, path));
  ASSIGN_OR_RETURN(GzFile f, Open(path));
  ASSIGN_OR_RETURN(const uint32_t magic, ReadBigEndian32(f.get(), path, "header"));
  RETURN_IF_ERROR(CheckMagic(magic, kLabelsMagic, path, "label"));
  ASSIGN_OR_RETURN(const int64_t count, ReadBigEndian32(f.get(), path, "header"));
  if (count != 0) RETURN_IF_ERROR(CheckDim(count, kMaxCount, path, "label count", 4));
  const int64_t n = (limit == 0 || limit > count) ? count : limit;
  std::vector<uint8_t> labels;
  RETURN_IF_ERROR(ReadInto(f.get(), path, "labels", n, &labels));
  return labels;
}

}  // namespace pscluster
