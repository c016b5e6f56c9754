// Synthetic CTR-like data (DataSourceSpec format "synthetic_ctr") for
// benchmarks: embedding-table memory under a max_rows bound, hot-key skew
// across hash shards, lookup/push throughput. It is NOT a data set to make
// accuracy claims on: its labels come from a made-up model.
//
// Example i is generated from its own RNG, seeded by (seed, i), so any range
// of examples can be generated independently (a worker may generate only its
// share) and always comes out the same:
//   - for each model.categorical feature f, in order: one rank drawn from
//     Zipf(zipf_exponent) over [0, id_space) (rank 0 the most frequent), then
//     scrambled so hot ids spread over hash shards:
//       id = HashIntValue(FeatureSeed(f), rank)      (hashed features)
//       id = that hash mod vocab_size                (fixed vocabularies)
//   - label ~ Bernoulli(sigmoid(sum over f of SyntheticWeight(f, rank))), so
//     the head ids carry signal and a model can learn it;
//   - model.dense_inputs values of N(0, 1) noise.
//
// Thread-safety: the functions are pure; a ZipfSampler is immutable after
// construction and may be shared; a SplitMix64 is not thread-safe.
#ifndef PSCLUSTER_WORKER_CORE_SYNTHETIC_CTR_H_
#define PSCLUSTER_WORKER_CORE_SYNTHETIC_CTR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "worker/core/dataset.h"

namespace pscluster {

// A small, fast, fully specified PRNG (Steele et al.'s SplitMix64); unlike
// <random>'s distributions its outputs are the same on every platform.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, 1), 53 random bits.
  double Uniform();
  // Standard normal (Box-Muller; one value per call).
  double Normal();

 private:
  uint64_t state_;
};

// Samples ranks in [0, n) with P(k) proportional to (k + 1)^-exponent, in
// O(1) expected time per draw whatever n is: rejection-inversion sampling
// (W. Hörmann, G. Derflinger, "Rejection-inversion to generate variates from
// monotone discrete distributions", ACM TOMACS 6(3), 1996), as in Apache
// Commons' RejectionInversionZipfSampler.
class ZipfSampler {
 public:
  // REQUIRES: n >= 1, exponent > 0.
  ZipfSampler(int64_t n, double exponent);
  int64_t Sample(SplitMix64& rng) const;

 private:
  double H(double x) const;             // integral of h, up to a constant
  double HInverse(double x) const;
  double h(double x) const;             // x^-exponent

  int64_t n_;
  double exponent_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
};

// The label model's weight of `rank` of a feature: a value in [-1, 1]
// derived from a hash of (feature, rank) for rank < kSyntheticWeightedRanks,
// 0 for the tail.
inline constexpr int64_t kSyntheticWeightedRanks = 1000;
double SyntheticWeight(uint64_t feature_seed, int64_t rank);

// Examples [begin, end) of the stream (REQUIRES: 0 <= begin <= end;
// source.format == "synthetic_ctr"). INVALID_ARGUMENT when the model has no
// categorical feature, or id_space < 1, or zipf_exponent <= 0.
// num_classes is 2.
absl::StatusOr<Dataset> GenerateSyntheticCtr(const DataSourceSpec& source, const ModelSpec& model,
                                             int64_t begin, int64_t end);

// Examples [0, num_examples), or the first `limit` of them when limit > 0.
absl::StatusOr<Dataset> LoadSyntheticCtr(const DataSourceSpec& source, const ModelSpec& model);

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_SYNTHETIC_CTR_H_
