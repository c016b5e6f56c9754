#include "ps/core/row_initializer.h"

#include <xxhash.h>

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace pscluster {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit state, full period, passes
// BigCrush; plenty for initial weights.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits (a float's precision).
  float NextFloat() { return static_cast<float>(Next() >> 40) * 0x1p-24f; }
  // Uniform in (0, 1] with 53 random bits.
  double NextOpenDouble() { return static_cast<double>((Next() >> 11) + 1) * 0x1p-53; }

 private:
  uint64_t state_;
};

}  // namespace

std::string LogicalTableName(absl::string_view name) {
  const size_t slash = name.rfind("/part_");
  if (slash == absl::string_view::npos) return std::string(name);
  const absl::string_view index = name.substr(slash + 6);
  if (index.empty()) return std::string(name);
  for (char c : index) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::string(name);
  }
  return std::string(name.substr(0, slash));
}

RowInitializer::RowInitializer(const InitializerProto& init, absl::string_view table_name,
                               int64_t dim) {
  const std::string logical = LogicalTableName(table_name);
  table_seed_ = XXH3_64bits_withSeed(logical.data(), logical.size(), init.seed());
  const std::string& t = init.type();
  if (t == "zeros" || t == "ones" || t == "constant") {
    kind_ = Kind::kConstant;
    constant_ = t == "zeros" ? 0.0f : t == "ones" ? 1.0f : init.value();
  } else if (t == "random_normal") {
    kind_ = Kind::kNormal;
    mean_ = init.mean();
    stddev_ = init.stddev();
  } else if (t == "glorot_uniform") {
    kind_ = Kind::kUniform;
    hi_ = static_cast<float>(std::sqrt(6.0 / (2.0 * static_cast<double>(dim))));
    lo_ = -hi_;
  } else {  // random_uniform
    kind_ = Kind::kUniform;
    lo_ = init.minval();
    hi_ = init.maxval();
  }
}

void RowInitializer::Fill(uint64_t id, absl::Span<float> out) const {
  if (kind_ == Kind::kConstant) {
    for (float& x : out) x = constant_;
    return;
  }
  SplitMix64 rng(XXH3_64bits_withSeed(&id, sizeof(id), table_seed_));
  if (kind_ == Kind::kUniform) {
    for (float& x : out) x = lo_ + (hi_ - lo_) * rng.NextFloat();
    return;
  }
  // Box-Muller: two uniforms give two independent normals.
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < out.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(rng.NextOpenDouble()));
    const double theta = kTwoPi * rng.NextOpenDouble();
    out[i] = static_cast<float>(mean_ + stddev_ * r * std::cos(theta));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(mean_ + stddev_ * r * std::sin(theta));
  }
}

}  // namespace pscluster
