#include "common/initializer.h"

#include <zlib.h>

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace pscluster {

absl::Status ValidateInitializer(const InitializerProto& init) {
  const std::string& t = init.type();
  if (t == "zeros" || t == "ones" || t == "constant" || t == "glorot_uniform") {
    return absl::OkStatus();
  }
  if (t == "random_uniform") {
    if (!(init.minval() < init.maxval())) {
      return absl::InvalidArgumentError(absl::StrCat("initializer random_uniform needs minval < maxval, got ",
                                                     init.minval(), " >= ", init.maxval()));
    }
    return absl::OkStatus();
  }
  if (t == "random_normal") {
    if (!(init.stddev() > 0)) {
      return absl::InvalidArgumentError("initializer random_normal needs stddev > 0");
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown initializer '", t,
      "' (expected zeros, ones, constant, random_uniform, random_normal or glorot_uniform)"));
}

void RunInitializer(const InitializerProto& init, const std::string& name,
                    absl::Span<const int64_t> shape, absl::Span<float> out) {
  const std::string& t = init.type();
  if (t == "zeros" || t == "ones" || t == "constant") {
    const float v = t == "zeros" ? 0.0f : t == "ones" ? 1.0f : init.value();
    for (float& x : out) x = v;
    return;
  }
  // Seed from the job seed and a stable hash of the variable's name (zlib's
  // CRC-32: the same in every process, unlike absl::Hash).
  const uint32_t name_hash =
      crc32(0L, reinterpret_cast<const Bytef*>(name.data()), static_cast<uInt>(name.size()));
  std::mt19937_64 rng(init.seed() * 0x9E3779B97F4A7C15ull + name_hash);
  if (t == "random_normal") {
    std::normal_distribution<float> dist(init.mean(), init.stddev());
    for (float& x : out) x = dist(rng);
    return;
  }
  float lo = init.minval(), hi = init.maxval();
  if (t == "glorot_uniform") {
    double fan_in = 1, fan_out = 1;
    if (shape.size() == 1) {
      fan_in = fan_out = static_cast<double>(shape[0]);
    } else if (shape.size() >= 2) {
      double receptive = 1;
      for (size_t i = 2; i < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
      fan_in = static_cast<double>(shape[0]) * receptive;
      fan_out = static_cast<double>(shape[1]) * receptive;
    }
    const float limit = static_cast<float>(std::sqrt(6.0 / std::max(1.0, fan_in + fan_out)));
    lo = -limit;
    hi = limit;
  }
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& x : out) x = dist(rng);
}

}  // namespace pscluster
