// Row ids on the wire: RowIds.ids and SparseGradient.ids (protos/ps.proto)
// carry 64-bit ids as packed little-endian bytes, 8 per id.
//
// Workers encode the ids of the rows they read or update; the PS decodes
// them. A DENSE variable's id is a signed local row number (int64), a
// HASH_TABLE's is an unsigned key (uint64); both travel as the same 8 bytes.
//
// Pure functions; thread-safe.
#ifndef PSCLUSTER_COMMON_ROW_IDS_H_
#define PSCLUSTER_COMMON_ROW_IDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace pscluster {

// Packs `ids` as little-endian 64-bit integers.
std::string EncodeRowIds(absl::Span<const uint64_t> ids);
std::string EncodeRowIds(absl::Span<const int64_t> ids);

// Unpacks `bytes`. INVALID_ARGUMENT naming `what` if its size is not a
// multiple of 8.
absl::StatusOr<std::vector<uint64_t>> DecodeRowIds(const std::string& bytes,
                                                   const std::string& what);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_ROW_IDS_H_
