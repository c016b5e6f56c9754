#include "common/row_ids.h"

#include <cstring>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"

// The wire format is little-endian; on such hosts it is a plain memcpy.
#if !defined(ABSL_IS_LITTLE_ENDIAN)
#error "row id encoding assumes a little-endian host"
#endif

namespace pscluster {

std::string EncodeRowIds(absl::Span<const uint64_t> ids) {
  std::string out(ids.size() * sizeof(uint64_t), '\0');
  if (!ids.empty()) std::memcpy(out.data(), ids.data(), out.size());
  return out;
}

std::string EncodeRowIds(absl::Span<const int64_t> ids) {
  std::string out(ids.size() * sizeof(int64_t), '\0');
  if (!ids.empty()) std::memcpy(out.data(), ids.data(), out.size());
  return out;
}

absl::StatusOr<std::vector<uint64_t>> DecodeRowIds(const std::string& bytes,
                                                   const std::string& what) {
  if (bytes.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ids is ", bytes.size(),
                     " bytes, not a multiple of 8 (ids are little-endian 64-bit integers)"));
  }
  std::vector<uint64_t> ids(bytes.size() / sizeof(uint64_t));
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), bytes.size());
  return ids;
}

}  // namespace pscluster
