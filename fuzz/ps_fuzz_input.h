// The input format of ps_requests_fuzzer: a short sequence of ParameterServer
// requests, each one record
//   [1 byte: op] [2 bytes: payload length, little-endian] [payload]
// where the payload is the serialized request of that op (a record cut short
// by the end of the input takes what is left). make_ps_corpus writes seed
// inputs in this format; the fuzzer decodes them. Header-only, no state.
#ifndef PSCLUSTER_FUZZ_PS_FUZZ_INPUT_H_
#define PSCLUSTER_FUZZ_PS_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/message_lite.h"

namespace pscluster {
namespace fuzz {

enum class PsOp : uint8_t {
  kCreateVariables = 0,  // CreateVariablesRequest
  kPull = 1,             // PullRequest (names and row lookups)
  kPush = 2,             // PushRequest (dense and sparse gradients, update key, fused pull)
  kPruneKeys = 3,        // PruneKeysRequest
};
constexpr int kNumPsOps = 4;

struct PsRecord {
  PsOp op;
  std::string payload;
};

// Appends one record holding `request` to `out`.
inline void AppendRecord(PsOp op, const google::protobuf::MessageLite& request, std::string* out) {
  const std::string payload = request.SerializeAsString();
  const size_t n = std::min<size_t>(payload.size(), 0xffff);
  out->push_back(static_cast<char>(op));
  out->push_back(static_cast<char>(n & 0xff));
  out->push_back(static_cast<char>(n >> 8));
  out->append(payload, 0, n);
}

// Splits `data` into at most `max_records` records; any op byte is mapped
// onto the kNumPsOps ops.
inline std::vector<PsRecord> DecodeRecords(const uint8_t* data, size_t size, size_t max_records) {
  std::vector<PsRecord> records;
  size_t pos = 0;
  while (pos < size && records.size() < max_records) {
    const PsOp op = static_cast<PsOp>(data[pos++] % kNumPsOps);
    size_t n = 0;
    if (pos < size) n = data[pos++];
    if (pos < size) n |= size_t{data[pos++]} << 8;
    n = std::min(n, size - pos);
    records.push_back({op, std::string(reinterpret_cast<const char*>(data + pos), n)});
    pos += n;
  }
  return records;
}

}  // namespace fuzz
}  // namespace pscluster

#endif  // PSCLUSTER_FUZZ_PS_FUZZ_INPUT_H_
