#include "worker/core/features.h"

#include <xxhash.h>

#include <algorithm>
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
  if (spec_.bucket_width > 0 || !spec_.boundaries.empty()) {
    return AddFloat(static_cast<double>(value), ids);
  }
  return AddId(value, ids);
}

absl::Status CategoricalEncoder::NumericId(double value, int64_t* out) const {
  double id = value;
  if (!spec_.boundaries.empty()) {
    if (std::isnan(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature '", spec_.name, "': a value that is not a number"));
    }
    *out = std::upper_bound(spec_.boundaries.begin(), spec_.boundaries.end(), value) -
           spec_.boundaries.begin();
    return absl::OkStatus();
  }
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
  *out = static_cast<int64_t>(id);
  return absl::OkStatus();
}

absl::Status CategoricalEncoder::AddFloat(double value, std::vector<uint64_t>* ids) const {
  int64_t id = 0;
  if (absl::Status s = NumericId(value, &id); !s.ok()) return s;
  return AddId(id, ids);
}

absl::Status CategoricalEncoder::AddCross(const std::vector<CrossValue>& values,
                                          std::vector<uint64_t>* ids) const {
  const bool bucketized = spec_.bucket_width > 0 || !spec_.boundaries.empty();
  std::vector<unsigned char> tokens(8 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const CrossValue& v = values[i];
    uint64_t token = 0;
    if (v.type == ColumnSpec::Type::kString) {
      const absl::string_view text = absl::StripAsciiWhitespace(v.text);
      if (text.empty()) return absl::OkStatus();  // a missing value: no id
      token = XXH3_64bits(text.data(), text.size());
    } else {
      int64_t n = v.int_value;
      if (v.type == ColumnSpec::Type::kFloat || bucketized) {
        const double x =
            v.type == ColumnSpec::Type::kFloat ? v.float_value : static_cast<double>(v.int_value);
        if (absl::Status s = NumericId(x, &n); !s.ok()) return s;
      }
      unsigned char bytes[8];
      Le64(static_cast<uint64_t>(n), bytes);
      token = XXH3_64bits(bytes, sizeof(bytes));
    }
    Le64(token, &tokens[8 * i]);
  }
  const uint64_t h = XXH3_64bits_withSeed(tokens.data(), tokens.size(), seed_);
  ids->push_back(spec_.vocab_size > 0 ? h % static_cast<uint64_t>(spec_.vocab_size) : h);
  return absl::OkStatus();
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
