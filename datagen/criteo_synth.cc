#include "datagen/criteo_synth.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pscluster {
namespace {

// The token of a missing categorical value (never a 32-bit hash).
constexpr uint64_t kMissingToken = uint64_t{1} << 40;
// Salts of the crosses' weights (categorical columns use 1 + k).
constexpr uint64_t kCrossSalt = 1000;
// The pilot sample the bias is calibrated on.
constexpr int kPilotRows = 20000;

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

uint64_t Mix(uint64_t a, uint64_t b) {
  const uint64_t words[2] = {a, b};
  return XXH3_64bits(words, sizeof(words));
}

// A standard normal that is a function of `h` (Box-Muller on its halves).
double NormalOfHash(uint64_t h) {
  const double u1 = (static_cast<double>(h >> 32) + 0.5) / 4294967296.0;
  const double u2 = (static_cast<double>(h & 0xffffffffu) + 0.5) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t Bucket(int64_t v) {
  return static_cast<uint64_t>(std::floor(std::log2(1.0 + static_cast<double>(v))));
}

}  // namespace

CriteoModel::CriteoModel(const CriteoSynthOptions& options) : options_(options) {
  std::mt19937_64 rng(Mix(options.seed, 0x6372697465ull));  // "crite"
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double signal = options.signal;
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    int_mu_[j] = 4.0 * uniform(rng);
    int_sigma_[j] = 0.8 + 1.2 * uniform(rng);
    int_miss_[j] = 0.45 * uniform(rng);
    int_w_[j] = signal * 0.25 * normal(rng);
    int_missing_w_[j] = signal * 0.3 * normal(rng);
  }
  // 18 of the 26 columns carry signal.
  std::array<int, kCriteoCategoricalFeatures> order;
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int i = 0; i < kCriteoCategoricalFeatures; ++i) {
    const int k = order[i];
    const double base = std::exp(std::log(4.0) + (std::log(2e6) - std::log(4.0)) * uniform(rng));
    vocab_[k] = std::max<int64_t>(2, std::llround(base * options.vocab_scale));
    cat_exponent_[k] = 1.05 + 0.25 * uniform(rng);
    cat_miss_[k] = uniform(rng) < 0.7 ? 0.05 * uniform(rng) : 0.45 * uniform(rng);
    cat_sigma_[k] = i < 18 ? signal * (0.15 + 0.45 * uniform(rng)) : 0.0;
  }
  cross_sigma_ = signal * 0.5;

  // The bias: mean sigmoid(logit + bias) over a pilot sample equals ctr.
  std::mt19937_64 pilot(Mix(options.seed, 0x70696c6f74ull));  // "pilot"
  std::vector<double> z(kPilotRows);
  CriteoRow row;
  for (double& v : z) {
    DrawFeatures(&pilot, &row);
    v = LogitWithoutBias(row);
  }
  double lo = -30, hi = 30;
  for (int it = 0; it < 80; ++it) {
    const double mid = 0.5 * (lo + hi);
    double mean = 0;
    for (double v : z) mean += Sigmoid(v + mid);
    mean /= z.size();
    (mean < options.ctr ? lo : hi) = mid;
  }
  bias_ = 0.5 * (lo + hi);
}

double CriteoModel::TokenWeight(uint64_t salt, uint64_t token, double sigma) const {
  if (sigma == 0) return 0;
  return sigma * NormalOfHash(Mix(Mix(options_.seed, salt), token));
}

double CriteoModel::LogitWithoutBias(const CriteoRow& row) const {
  double z = 0;
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    z += row.has_int[j] ? int_w_[j] * std::log1p(static_cast<double>(row.ints[j]))
                        : int_missing_w_[j];
  }
  std::array<uint64_t, kCriteoCategoricalFeatures> token;
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    token[k] = row.has_cat[k] ? row.cats[k] : kMissingToken;
    z += TokenWeight(1 + k, token[k], cat_sigma_[k]);
  }
  const uint64_t i1 = row.has_int[0] ? Bucket(row.ints[0]) : kMissingToken;
  z += TokenWeight(kCrossSalt + 0, Mix(token[0], token[1]), cross_sigma_);
  z += TokenWeight(kCrossSalt + 1, Mix(token[2], token[8]), cross_sigma_);
  z += TokenWeight(kCrossSalt + 2, Mix(token[3], i1), cross_sigma_);
  return z;
}

double CriteoModel::Logit(const CriteoRow& row) const { return bias_ + LogitWithoutBias(row); }

double CriteoModel::Probability(const CriteoRow& row) const { return Sigmoid(Logit(row)); }

void CriteoModel::DrawFeatures(std::mt19937_64* rng, CriteoRow* row) const {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    row->has_int[j] = uniform(*rng) >= int_miss_[j];
    const double v = std::exp(int_mu_[j] + int_sigma_[j] * normal(*rng));
    row->ints[j] = row->has_int[j] ? static_cast<int64_t>(std::min(v, 2147483647.0)) : 0;
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    row->has_cat[k] = uniform(*rng) >= cat_miss_[k];
    // Truncated power law on [1, V]: inverse CDF of the continuous density.
    const double s = cat_exponent_[k];
    const double tail = std::pow(static_cast<double>(vocab_[k]), 1.0 - s);
    const double u = uniform(*rng);
    const double x = std::pow(1.0 - u * (1.0 - tail), 1.0 / (1.0 - s));
    const int64_t rank = std::clamp<int64_t>(static_cast<int64_t>(x), 1, vocab_[k]);
    row->cats[k] = row->has_cat[k]
                       ? static_cast<uint32_t>(Mix(Mix(options_.seed, 1 + k), rank))
                       : 0;
  }
}

CriteoSampler::CriteoSampler(const CriteoModel* model, uint64_t stream, uint64_t index)
    : model_(model), rng_(Mix(Mix(model->options().seed, stream), index)) {}

void CriteoSampler::Next(CriteoRow* row, double* probability) {
  model_->DrawFeatures(&rng_, row);
  *probability = model_->Probability(*row);
  row->label = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < *probability ? 1 : 0;
}

std::string CriteoTsvLine(const CriteoRow& row) {
  std::string line = absl::StrCat(row.label);
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    line.push_back('\t');
    if (row.has_int[j]) absl::StrAppend(&line, row.ints[j]);
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    line.push_back('\t');
    if (row.has_cat[k]) absl::StrAppendFormat(&line, "%08x", row.cats[k]);
  }
  line.push_back('\n');
  return line;
}

tensorflow::Example CriteoExample(const CriteoRow& row) {
  tensorflow::Example example;
  auto* features = example.mutable_features()->mutable_feature();
  (*features)["label"].mutable_int64_list()->add_value(row.label);
  for (int j = 0; j < kCriteoIntegerFeatures; ++j) {
    tensorflow::Int64List* list = (*features)[absl::StrCat("I", j + 1)].mutable_int64_list();
    if (row.has_int[j]) list->add_value(row.ints[j]);
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    tensorflow::BytesList* list = (*features)[absl::StrCat("C", k + 1)].mutable_bytes_list();
    if (row.has_cat[k]) list->add_value(absl::StrFormat("%08x", row.cats[k]));
  }
  return example;
}

double Auc(const std::vector<double>& scores, const std::vector<int>& labels) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positives = 0, negatives = 0, rank_sum = 0;
  for (size_t i = 0; i < order.size();) {
    size_t end = i;
    while (end < order.size() && scores[order[end]] == scores[order[i]]) ++end;
    const double mean_rank = 0.5 * static_cast<double>(i + 1 + end);  // ranks i+1..end
    for (size_t t = i; t < end; ++t) {
      if (labels[order[t]] != 0) {
        positives += 1;
        rank_sum += mean_rank;
      } else {
        negatives += 1;
      }
    }
    i = end;
  }
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

double ExpectedBayesAuc(const std::vector<double>& p) {
  std::vector<double> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  double sum_p = 0, sum_q = 0, self = 0;
  for (double v : sorted) {
    sum_p += v;
    sum_q += 1 - v;
    self += v * (1 - v);
  }
  const double pairs = sum_p * sum_q - self;  // over ordered pairs of distinct examples
  if (pairs <= 0) return std::numeric_limits<double>::quiet_NaN();
  double numerator = 0, negatives_below = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t end = i;
    double group_p = 0, group_q = 0, group_self = 0;
    while (end < sorted.size() && sorted[end] == sorted[i]) {
      group_p += sorted[end];
      group_q += 1 - sorted[end];
      group_self += sorted[end] * (1 - sorted[end]);
      ++end;
    }
    numerator += group_p * negatives_below + 0.5 * (group_p * group_q - group_self);
    negatives_below += group_q;
    i = end;
  }
  return numerator / pairs;
}

}  // namespace pscluster
