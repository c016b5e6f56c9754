// How raw column values become model inputs: the categorical id rules of a
// CategoricalFeatureSpec, the stable hashes behind them, and the seeded
// holdout split of a data file's rows.
//
// Every hash here is XXH3 (xxhash 0.8), so ids and splits are the same in
// every process, on every machine, in every run:
//   a string value v of feature f:  XXH3_64bits_withSeed(v, FeatureSeed(f))
//   an int value n of feature f:    XXH3_64bits_withSeed(le64(n), FeatureSeed(f))
//   FeatureSeed(f):                 XXH3_64bits(f's name)
//   a cross of values v1..vk of feature f (its `cross` columns, in the
//   order the spec lists them):
//       XXH3_64bits_withSeed(le64(t1) || ... || le64(tk), FeatureSeed(f))
//     with ti the value's token: XXH3_64bits(text) for a string (trimmed of
//     spaces), XXH3_64bits(le64(n)) for a number n, where n is the value's
//     bucket id when the feature is bucketized, else the value itself (a
//     whole number).
// where le64(n) is n's 8 bytes, little-endian and || is concatenation. So
// string "7" and int 7 give different tokens; a cross of the same columns in
// another order, or under another feature name, gives other ids.
//
// Thread-safety: the functions are pure; a CategoricalEncoder is immutable
// after construction and safe to share across threads.
#ifndef PSCLUSTER_WORKER_CORE_FEATURES_H_
#define PSCLUSTER_WORKER_CORE_FEATURES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/job_spec.h"

namespace pscluster {

// XXH3_64bits of the feature's name: the seed of its value hashes.
uint64_t FeatureSeed(absl::string_view feature_name);
// XXH3_64bits_withSeed of `value`'s bytes.
uint64_t HashStringValue(uint64_t feature_seed, absl::string_view value);
// XXH3_64bits_withSeed of `value` as 8 little-endian bytes.
uint64_t HashIntValue(uint64_t feature_seed, int64_t value);

// Whether 0-based data row `row` belongs to the holdout part of a split:
// XXH3_64bits_withSeed(le64(row), seed) < fraction * 2^64. Always false when
// fraction <= 0, always true when fraction >= 1.
bool InHoldout(int64_t row, double fraction, uint64_t seed);

// Turns one feature's column values into ids, as its spec says:
// - a number: id = value, or floor(value / bucket_width) when bucket_width > 0,
//   or with `boundaries` b[0] < ... < b[n-1] (TF's bucketized_column) the
//   number of boundaries <= value: value < b[0] -> 0, b[i-1] <= value < b[i]
//   -> i, value >= b[n-1] -> n (NaN is an error); a float column without
//   bucketization must hold whole numbers;
// - a string: split at `separator` (when set) into values, each trimmed of
//   spaces, empty ones skipped; each value's id is HashStringValue;
// - fixed vocabulary (vocab_size > 0): a numeric id must lie in
//   [0, vocab_size), else it is an error (oov: error) or HashIntValue(id) mod
//   vocab_size (oov: hash); a string's hash is always taken mod vocab_size;
// - hashed: a numeric id >= 0 is used as it is; a negative one is hashed.
// - a cross (`cross` lists two or more columns): one id per row, the cross
//   hash above (mod vocab_size for a fixed vocabulary; as it is when
//   hashed). A row missing any crossed value (or with a string value empty
//   after trimming) gets no id. Crossed columns are single-valued (the spec
//   refuses a separator on a cross), so a cross never multiplies ids.
class CategoricalEncoder {
 public:
  explicit CategoricalEncoder(const CategoricalFeatureSpec& spec);

  // Append the ids of one value to `ids`. INVALID_ARGUMENT, without a
  // file/line prefix (the caller adds it), e.g.
  //   "feature 'user': id 9001 outside its vocabulary [0, 672)"
  //   "feature 'year': 1995.5 is not a whole number (give it a bucket_width)"
  absl::Status AddInt(int64_t value, std::vector<uint64_t>* ids) const;
  absl::Status AddFloat(double value, std::vector<uint64_t>* ids) const;
  void AddString(absl::string_view value, std::vector<uint64_t>* ids) const;

  // One crossed column's present value in a row.
  struct CrossValue {
    ColumnSpec::Type type = ColumnSpec::Type::kString;
    int64_t int_value = 0;     // kInt
    double float_value = 0;    // kFloat
    absl::string_view text;    // kString
  };
  // Appends the cross id of one row's values, one per spec.cross column in
  // order. REQUIRES: spec().cross.size() == values.size(). INVALID_ARGUMENT
  // as AddFloat for a numeric value that gives no id.
  absl::Status AddCross(const std::vector<CrossValue>& values, std::vector<uint64_t>* ids) const;

  const CategoricalFeatureSpec& spec() const { return spec_; }

 private:
  absl::Status AddId(int64_t id, std::vector<uint64_t>* ids) const;
  // The id of a number before the vocabulary: bucketized, or whole.
  absl::Status NumericId(double value, int64_t* id) const;
  void AddOne(absl::string_view value, std::vector<uint64_t>* ids) const;

  CategoricalFeatureSpec spec_;
  uint64_t seed_;
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_FEATURES_H_
