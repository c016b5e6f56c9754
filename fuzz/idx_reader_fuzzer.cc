// Fuzz target for the IDX reader (common/idx_reader.h): ReadIdxImages and
// ReadIdxLabels on a file holding the input.
//
// Input: [byte 0: bit 0 set = a label file, else an image file]
//        [byte 1: limit 0..254; 255 = -1, which must be refused]
//        [the file's bytes: plain IDX, or gzip (zlib reads both)]
// Any file must give its data or INVALID_ARGUMENT naming the file — never a
// crash, an unbounded allocation or a sanitizer report. What is read must
// match the header (count x rows x cols bytes, count within the limit), and
// for a plain (not gzipped) file it must be exactly the bytes after the
// header.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/idx_reader.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/memfd_file.h"

namespace pscluster {
namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void CheckError(const absl::Status& s, const std::string& path) {
  FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
  FUZZ_CHECK(s.message().find(path) != absl::string_view::npos,
             absl::StrCat("error does not name the file: ", s.ToString()));
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;  // NOLINT(build/namespaces): a fuzz entry point
  if (size < 2) return 0;
  const bool labels = data[0] & 1;
  const int64_t limit = data[1] == 255 ? -1 : data[1];
  const uint8_t* file = data + 2;
  const size_t file_size = size - 2;
  const bool plain = !(file_size >= 2 && file[0] == 0x1f && file[1] == 0x8b);
  fuzz::MemFile mem(file, file_size);

  if (labels) {
    absl::StatusOr<std::vector<uint8_t>> got = ReadIdxLabels(mem.path(), limit);
    if (!got.ok()) {
      CheckError(got.status(), mem.path());
      return 0;
    }
    FUZZ_CHECK(limit >= 0, "a negative limit was accepted");
    if (limit > 0) FUZZ_CHECK(got->size() <= static_cast<size_t>(limit), "over the limit");
    if (plain) {
      FUZZ_CHECK(file_size >= 8 + got->size(), "more labels than the file holds");
      const uint32_t count = BigEndian32(file + 4);
      FUZZ_CHECK(got->size() == (limit == 0 ? count : std::min<uint32_t>(count, limit)),
                 absl::StrCat(got->size(), " labels for a count of ", count));
      FUZZ_CHECK(got->empty() || std::memcmp(got->data(), file + 8, got->size()) == 0,
                 "labels differ from the file's bytes");
    }
    return 0;
  }

  absl::StatusOr<IdxImages> got = ReadIdxImages(mem.path(), limit);
  if (!got.ok()) {
    CheckError(got.status(), mem.path());
    return 0;
  }
  FUZZ_CHECK(limit >= 0, "a negative limit was accepted");
  FUZZ_CHECK(got->rows >= 1 && got->cols >= 1 && got->count >= 0, "bad dimensions accepted");
  if (limit > 0) FUZZ_CHECK(got->count <= limit, "over the limit");
  FUZZ_CHECK(static_cast<int64_t>(got->pixels.size()) == got->count * got->rows * got->cols,
             absl::StrCat(got->pixels.size(), " pixels for ", got->count, " images of ", got->rows,
                          "x", got->cols));
  if (plain) {
    FUZZ_CHECK(file_size >= 16 + got->pixels.size(), "more pixels than the file holds");
    FUZZ_CHECK(BigEndian32(file + 8) == got->rows && BigEndian32(file + 12) == got->cols,
               "dimensions differ from the header");
    FUZZ_CHECK(
        got->pixels.empty() || std::memcmp(got->pixels.data(), file + 16, got->pixels.size()) == 0,
        "pixels differ from the file's bytes");
  }
  return 0;
}
