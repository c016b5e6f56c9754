#include "worker/core/synthetic_ctr.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/core/features.h"

namespace pscluster {
namespace {

// log1p(x) / x, continuous at 0.
double Helper1(double x) {
  if (std::abs(x) > 1e-8) return std::log1p(x) / x;
  return 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

// expm1(x) / x, continuous at 0.
double Helper2(double x) {
  if (std::abs(x) > 1e-8) return std::expm1(x) / x;
  return 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

// Salt that separates the label weights' hash from the id scrambling hash.
constexpr uint64_t kWeightSalt = 0x5713E1C7A1B2C3D5ull;
constexpr double kTwoPi = 6.283185307179586476925286766559;

}  // namespace

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SplitMix64::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

double SplitMix64::Normal() {
  const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

// The sampler works on the support {1, ..., n} with h(x) = x^-exponent and
// returns k - 1. H is an antiderivative of h written so that it stays exact
// as exponent -> 1: H(x) = ((x^(1-e)) - 1) / (1 - e), log(x) at e = 1.
ZipfSampler::ZipfSampler(int64_t n, double exponent) : n_(n), exponent_(exponent) {
  h_integral_x1_ = H(1.5) - 1.0;
  h_integral_n_ = H(static_cast<double>(n_) + 0.5);
  s_ = 2.0 - HInverse(H(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const { return std::exp(-exponent_ * std::log(x)); }

double ZipfSampler::H(double x) const {
  const double log_x = std::log(x);
  return Helper2((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::HInverse(double x) const {
  double t = x * (1.0 - exponent_);
  if (t < -1.0) t = -1.0;  // guards rounding at the far end of the support
  return std::exp(Helper1(t) * x);
}

int64_t ZipfSampler::Sample(SplitMix64& rng) const {
  while (true) {
    // u is uniform in (H(1.5) - 1, H(n + 0.5)]: the area under the hat.
    const double u = h_integral_n_ + rng.Uniform() * (h_integral_x1_ - h_integral_n_);
    const double x = HInverse(u);
    int64_t k = static_cast<int64_t>(x + 0.5);
    k = std::clamp<int64_t>(k, 1, n_);
    // Accept at once when x falls in the part of k's cell that lies under
    // h (the common case), else compare against k's exact area.
    if (k - x <= s_ || u >= H(k + 0.5) - h(static_cast<double>(k))) return k - 1;
  }
}

double SyntheticWeight(uint64_t feature_seed, int64_t rank) {
  if (rank < 0 || rank >= kSyntheticWeightedRanks) return 0.0;
  const uint64_t h = HashIntValue(feature_seed ^ kWeightSalt, rank);
  return static_cast<double>(h >> 11) * 0x1.0p-52 - 1.0;
}

absl::StatusOr<Dataset> GenerateSyntheticCtr(const DataSourceSpec& source, const ModelSpec& model,
                                             int64_t begin, int64_t end) {
  if (model.categorical.empty()) {
    return absl::InvalidArgumentError("synthetic_ctr data needs at least one categorical feature");
  }
  if (source.id_space < 1) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic_ctr id_space must be >= 1, not ",
                                                   source.id_space));
  }
  if (!(source.zipf_exponent > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic_ctr zipf_exponent must be > 0, not ",
                                                   source.zipf_exponent));
  }
  if (begin < 0 || end < begin) {
    return absl::InvalidArgumentError(absl::StrCat("bad example range [", begin, ", ", end, ")"));
  }
  const size_t features = model.categorical.size();
  const ZipfSampler sampler(source.id_space, source.zipf_exponent);
  std::vector<uint64_t> seeds;
  for (const CategoricalFeatureSpec& f : model.categorical) seeds.push_back(FeatureSeed(f.name));

  Dataset d;
  d.count = end - begin;
  d.features = model.dense_inputs;
  d.num_classes = 2;
  d.y.reserve(d.count);
  d.x.reserve(d.count * d.features);
  d.categorical.resize(features);
  for (CategoricalColumn& c : d.categorical) {
    c.offsets.reserve(d.count + 1);
    c.offsets.push_back(0);
    c.ids.reserve(d.count);
  }
  for (int64_t i = begin; i < end; ++i) {
    SplitMix64 rng(HashIntValue(source.seed, i));
    double logit = 0.0;  // the label model's bias is 0: about half positive
    for (size_t k = 0; k < features; ++k) {
      const int64_t rank = sampler.Sample(rng);
      const uint64_t h = HashIntValue(seeds[k], rank);
      const int64_t vocab = model.categorical[k].vocab_size;
      d.categorical[k].ids.push_back(vocab > 0 ? h % static_cast<uint64_t>(vocab) : h);
      d.categorical[k].offsets.push_back(static_cast<int64_t>(d.categorical[k].ids.size()));
      logit += SyntheticWeight(seeds[k], rank);
    }
    const double p = 1.0 / (1.0 + std::exp(-logit));
    d.y.push_back(rng.Uniform() < p ? 1 : 0);
    for (int64_t j = 0; j < d.features; ++j) d.x.push_back(static_cast<float>(rng.Normal()));
  }
  return d;
}

absl::StatusOr<Dataset> LoadSyntheticCtr(const DataSourceSpec& source, const ModelSpec& model) {
  int64_t n = source.num_examples;
  if (source.limit > 0) n = std::min(n, source.limit);
  return GenerateSyntheticCtr(source, model, 0, std::max<int64_t>(n, 0));
}

}  // namespace pscluster
