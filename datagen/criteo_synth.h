// A Criteo-layout click log with a known answer. Criteo's own logs cannot be
// downloaded here, and on real logs nobody knows how good a model could be;
// here the labels come from a known logistic model over the features, so
// the Bayes-optimal AUC of any held-out set is computable, and a trained
// model's AUC can be judged against it.
//
// The layout is Criteo's (Kaggle display advertising): a label, 13 integer
// features I1..I13 (counts, heavy-tailed) and 26 categorical features
// C1..C26 (32-bit hashes written as 8 lowercase hex digits); any feature may
// be missing (an empty field).
//
// The known model, all of it derived from `seed` (CriteoModel):
//  - integer feature j: value floor(exp(mu_j + sigma_j * z)), z standard
//    normal, missing with probability miss_j; it adds w_j * log1p(value) to
//    the logit (0 when missing, plus a per-feature missing weight);
//  - categorical feature k: value rank r in [1, V_k] drawn from a power law
//    (continuous inverse CDF, exponent s_k in [1.05, 1.3]), written as
//    hex32(XXH3(seed, k, r)), missing with probability miss_k; the token it
//    writes (k, hex) adds sigma_k * N(0, 1), the normal drawn from a hash of
//    (seed, k, token); 18 of the 26 columns carry signal (sigma_k > 0), 8
//    are noise, as real logs have useless columns;
//  - three crosses add a weight per pair of tokens the same way: (C1, C2),
//    (C3, C9) and (C4, bucket(I1)) with bucket(v) = floor(log2(1 + v));
//  - a bias chosen so that the mean click probability is `ctr`.
// The label is Bernoulli(sigmoid(logit)). Since the weights are functions
// of the written tokens, the written features determine the probability:
// the model is the Bayes-optimal predictor of the data.
//
// Thread-safe: CriteoModel is immutable after construction; a CriteoSampler
// is thread-compatible (one per shard).
#ifndef PSCLUSTER_DATAGEN_CRITEO_SYNTH_H_
#define PSCLUSTER_DATAGEN_CRITEO_SYNTH_H_

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "protos/example.pb.h"

namespace pscluster {

inline constexpr int kCriteoIntegerFeatures = 13;
inline constexpr int kCriteoCategoricalFeatures = 26;

struct CriteoSynthOptions {
  uint64_t seed = 1;
  double ctr = 0.25;           // mean click probability
  double vocab_scale = 1.0;    // multiplies every column's vocabulary size
  // Multiplies every weight (higher: easier). The held-out Bayes AUC with
  // the other defaults: 0.78 at 0.5, 0.84 at 0.7, 0.90 at 1.0 (Criteo's
  // best published models reach about 0.80-0.81).
  double signal = 1.0;
};

// One example. Missing features are empty (has_* false).
struct CriteoRow {
  int label = 0;
  std::array<int64_t, kCriteoIntegerFeatures> ints{};
  std::array<bool, kCriteoIntegerFeatures> has_int{};
  std::array<uint32_t, kCriteoCategoricalFeatures> cats{};
  std::array<bool, kCriteoCategoricalFeatures> has_cat{};
};

class CriteoModel {
 public:
  explicit CriteoModel(const CriteoSynthOptions& options);

  // The logit of the click probability of `row`'s features (its label is
  // not read).
  double Logit(const CriteoRow& row) const;
  // sigmoid(Logit(row)).
  double Probability(const CriteoRow& row) const;

  // The features of one example, drawn with `rng` (the label is not set).
  void DrawFeatures(std::mt19937_64* rng, CriteoRow* row) const;

  const CriteoSynthOptions& options() const { return options_; }
  double bias() const { return bias_; }
  int64_t vocab_size(int k) const { return vocab_[k]; }
  // Whether categorical column k carries signal.
  bool informative(int k) const { return cat_sigma_[k] > 0; }

 private:
  double LogitWithoutBias(const CriteoRow& row) const;
  double TokenWeight(uint64_t salt, uint64_t token, double sigma) const;

  CriteoSynthOptions options_;
  std::array<double, kCriteoIntegerFeatures> int_mu_{}, int_sigma_{}, int_miss_{}, int_w_{},
      int_missing_w_{};
  std::array<int64_t, kCriteoCategoricalFeatures> vocab_{};
  std::array<double, kCriteoCategoricalFeatures> cat_exponent_{}, cat_miss_{}, cat_sigma_{};
  double cross_sigma_ = 0;
  double bias_ = 0;
};

// Draws whole examples (features, then the label from the model) for one
// shard: shard `index` of a data set has its own stream, so shards are
// written in any order, in parallel, and the same seed gives the same bytes.
class CriteoSampler {
 public:
  // `stream` separates data sets of one model (train 0, holdout 1).
  CriteoSampler(const CriteoModel* model, uint64_t stream, uint64_t index);

  // The next example; `*probability` is its click probability under the
  // model (what the Bayes-optimal predictor says).
  void Next(CriteoRow* row, double* probability);

 private:
  const CriteoModel* const model_;
  std::mt19937_64 rng_;
};

// `row` as one line of Criteo's TSV, with its trailing newline.
std::string CriteoTsvLine(const CriteoRow& row);

// `row` as a tf.Example: "label" (int64), "I1".."I13" (int64 lists),
// "C1".."C26" (bytes lists of the 8 hex digits); a missing feature is an
// empty list.
tensorflow::Example CriteoExample(const CriteoRow& row);

// The AUC of scores against 0/1 labels (ties count one half); NaN when one
// class is absent.
double Auc(const std::vector<double>& scores, const std::vector<int>& labels);

// The AUC the Bayes-optimal predictor is expected to reach on examples whose
// click probabilities are `p` (labels not yet drawn): the chance that a
// positive outranks a negative, each example being positive with its own
// probability, over pairs of distinct examples.
double ExpectedBayesAuc(const std::vector<double>& p);

}  // namespace pscluster

#endif  // PSCLUSTER_DATAGEN_CRITEO_SYNTH_H_
