#include "worker/core/features.h"

#include <xxhash.h>

#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pscluster {
namespace {

void Le64(uint64_t v, unsigned char out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

// int64 range as doubles: [-2^63, 2^63).
constexpr double kMinId = -9223372036854775808.0;
constexpr double kMaxIdExclusive = 9223372036854775808.0;

}  // namespace

uint64_t FeatureSeed(absl::string_view feature_name) {
  return XXH3_64bits(feature_name.data(), feature_name.size());
}

uint64_t HashStringValue(uint64_t feature_seed, absl::string_view value) {
  return XXH3_64bits_withSeed(value.data(), value.size(), feature_seed);
}

uint64_t HashIntValue(uint64_t feature_seed, int64_t value) {
  unsigned char bytes[8];
  Le64(static_cast<uint64_t>(value), bytes);
  return XXH3_64bits_withSeed(bytes, sizeof(bytes), feature_seed);
}

bool InHoldout(int64_t row, double fraction, uint64_t seed) {
  if (!(fraction > 0)) return false;
  if (fraction >= 1) return true;
  // Exact (a power-of-two scaling) and, as fraction < 1, below 2^64.
  const double bound = std::ldexp(fraction, 64);
  unsigned char bytes[8];
  Le64(static_cast<uint64_t>(row), bytes);
  return XXH3_64bits_withSeed(bytes, sizeof(bytes), seed) < static_cast<uint64_t>(bound);
}

CategoricalEncoder::CategoricalEncoder(const CategoricalFeatureSpec& spec)
    : spec_(spec), seed_(FeatureSeed(spec.name)) {}

absl::Status CategoricalEncoder::AddId(int64_t id, std::vector<uint64_t>* ids) const {
  if (spec_.vocab_size > 0) {
    if (id >= 0 && id < spec_.vocab_size) {
      ids->push_back(static_cast<uint64_t>(id));
    } else if (spec_.oov == OutOfVocabulary::kHash) {
      ids->push_back(HashIntValue(seed_, id) % static_cast<uint64_t>(spec_.vocab_size));
    } else {
      // Values read from a data file are never quoted in errors (the
      // reader names the file and line).
      return absl::InvalidArgumentError(absl::StrCat("feature '", spec_.name,
                                                     "': an id outside its vocabulary [0, ",
                                                     spec_.vocab_size, ")"));
    }
  } else {
    ids->push_back(id >= 0 ? static_cast<uint64_t>(id) : HashIntValue(seed_, id));
  }
  return absl::OkStatus();
}

absl::Status CategoricalEncoder::AddInt(int64_t value, std::vector<uint64_t>* ids) const {
  if (spec_.bucket_width > 0) return AddFloat(static_cast<double>(value), ids);
  return AddId(value, ids);
}

absl::Status CategoricalEncoder::AddFloat(double value, std::vector<uint64_t>* ids) const {
  double id = value;
  if (spec_.bucket_width > 0) {
    id = std::floor(value / spec_.bucket_width);
  } else if (std::isfinite(value) && id != std::floor(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feature '", spec_.name, "': a value that is not a whole number (give it a bucket_width)"));
  }
  if (!(id >= kMinId && id < kMaxIdExclusive)) {
    return absl::InvalidArgumentError(
        absl::StrCat("feature '", spec_.name, "': a value that gives no int64 id"));
  }
  return AddId(static_cast<int64_t>(id), ids);
}

void CategoricalEncoder::AddOne(absl::string_view value, std::vector<uint64_t>* ids) const {
  value = absl::StripAsciiWhitespace(value);
  if (value.empty()) return;
  const uint64_t h = HashStringValue(seed_, value);
  ids->push_back(spec_.vocab_size > 0 ? h % static_cast<uint64_t>(spec_.vocab_size) : h);
}

void CategoricalEncoder::AddString(absl::string_view value, std::vector<uint64_t>* ids) const {
  if (spec_.separator.empty()) {
    AddOne(value, ids);
    return;
  }
  for (absl::string_view part : absl::StrSplit(value, spec_.separator)) AddOne(part, ids);
}

}  // namespace pscluster
