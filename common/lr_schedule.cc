#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

absl::Status Invalid(const std::string& field, const std::string& want, double got) {
  return absl::InvalidArgumentError(
      absl::StrCat("learning_rate.", field, " must be ", want, ", got ", got));
}

bool PositiveRate(double r) { return std::isfinite(r) && r > 0; }

bool StepsInRange(int64_t s, int64_t min_value) { return s >= min_value && s <= kMaxScheduleSteps; }

// "0.001", "1e-05": the shortest form that reads back the same.
std::string Rate(double r) { return absl::StrCat(r); }

}  // namespace

absl::Status ValidateLearningRateSchedule(const LearningRateScheduleProto& s) {
  using P = LearningRateScheduleProto;
  if (!PositiveRate(s.initial())) return Invalid("initial", "finite and > 0", s.initial());
  if (!(std::isfinite(s.warmup_from()) && s.warmup_from() >= 0)) {
    return Invalid("warmup_from", "finite and >= 0", s.warmup_from());
  }
  if (!StepsInRange(s.warmup_steps(), 0)) {
    return Invalid("warmup_steps", absl::StrCat("in [0, ", kMaxScheduleSteps, "]"),
                   static_cast<double>(s.warmup_steps()));
  }
  switch (s.decay()) {
    case P::CONSTANT:
      return absl::OkStatus();
    case P::COSINE:
    case P::EXPONENTIAL:
      if (!StepsInRange(s.decay_steps(), 1)) {
        return Invalid("decay_steps", absl::StrCat("in [1, ", kMaxScheduleSteps, "]"),
                       static_cast<double>(s.decay_steps()));
      }
      if (s.decay() == P::COSINE && !(s.alpha() >= 0 && s.alpha() <= 1)) {
        return Invalid("alpha", "in [0, 1]", s.alpha());
      }
      if (s.decay() == P::EXPONENTIAL && !(s.decay_rate() > 0 && s.decay_rate() <= 1)) {
        return Invalid("decay_rate", "in (0, 1]", s.decay_rate());
      }
      return absl::OkStatus();
    case P::PIECEWISE_CONSTANT: {
      const int n = s.boundaries_size();
      if (n == 0 || n > kMaxScheduleBoundaries) {
        return Invalid("boundaries",
                       absl::StrCat("a list of 1 to ", kMaxScheduleBoundaries, " steps"), n);
      }
      if (s.values_size() != n + 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("learning_rate.values must have one more element than boundaries (", n + 1,
                         "), got ", s.values_size()));
      }
      for (int i = 0; i < n; ++i) {
        if (!StepsInRange(s.boundaries(i), 0) ||
            (i > 0 && s.boundaries(i) <= s.boundaries(i - 1))) {
          return absl::InvalidArgumentError(
              absl::StrCat("learning_rate.boundaries must be strictly increasing steps in [0, ",
                           kMaxScheduleSteps, "], got ", s.boundaries(i), " at index ", i));
        }
      }
      for (int i = 0; i <= n; ++i) {
        if (!PositiveRate(s.values(i))) {
          return Invalid(absl::StrCat("values[", i, "]"), "finite and > 0", s.values(i));
        }
      }
      if (s.initial() != s.values(0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "learning_rate.initial (", s.initial(), ") must equal values[0] (", s.values(0), ")"));
      }
      return absl::OkStatus();
    }
    default:
      return Invalid("decay", "constant, cosine, exponential or piecewise constant",
                     static_cast<double>(s.decay()));
  }
}

double LearningRateAt(const LearningRateScheduleProto& s, int64_t step) {
  using P = LearningRateScheduleProto;
  step = std::max<int64_t>(step, 0);
  if (step < s.warmup_steps()) {
    return s.warmup_from() + (s.initial() - s.warmup_from()) * static_cast<double>(step) /
                                 static_cast<double>(s.warmup_steps());
  }
  const int64_t d = step - s.warmup_steps();
  switch (s.decay()) {
    case P::COSINE: {
      const double done =
          static_cast<double>(std::min(d, s.decay_steps())) / static_cast<double>(s.decay_steps());
      const double cosine = 0.5 * (1.0 + std::cos(M_PI * done));
      return s.initial() * ((1.0 - s.alpha()) * cosine + s.alpha());
    }
    case P::EXPONENTIAL: {
      double p = static_cast<double>(d) / static_cast<double>(s.decay_steps());
      if (s.staircase()) p = std::floor(p);
      return s.initial() * std::pow(s.decay_rate(), p);
    }
    case P::PIECEWISE_CONSTANT: {
      // The first boundary at or past d names the value; none: the last.
      const auto it = std::lower_bound(s.boundaries().begin(), s.boundaries().end(), d);
      return s.values(static_cast<int>(it - s.boundaries().begin()));
    }
    default:
      return s.initial();
  }
}

LearningRateScheduleProto ScaleLearningRateSchedule(LearningRateScheduleProto s, double factor) {
  s.set_initial(s.initial() * factor);
  for (int i = 0; i < s.values_size(); ++i) s.set_values(i, s.values(i) * factor);
  return s;
}

std::string DescribeLearningRate(const OptimizerProto& o) {
  using P = LearningRateScheduleProto;
  if (!o.has_schedule()) return Rate(o.learning_rate());
  const P& s = o.schedule();
  std::string out = Rate(s.initial());
  switch (s.decay()) {
    case P::COSINE:
      absl::StrAppend(&out, ", cosine decay over ", s.decay_steps(), " steps to ",
                      Rate(s.initial() * s.alpha()));
      break;
    case P::EXPONENTIAL:
      absl::StrAppend(&out, s.staircase() ? ", x" : ", exponential decay x", Rate(s.decay_rate()),
                      " every ", s.decay_steps(), " steps");
      break;
    case P::PIECEWISE_CONSTANT:
      absl::StrAppend(&out, ", piecewise constant");
      for (int i = 0; i < s.boundaries_size(); ++i) {
        absl::StrAppend(&out, i == 0 ? " " : ", ", Rate(s.values(i + 1)), " after step ",
                        s.boundaries(i));
      }
      break;
    default:
      break;
  }
  if (s.warmup_steps() > 0) {
    absl::StrAppend(&out, ", after ", s.warmup_steps(), " warmup steps from ",
                    Rate(s.warmup_from()));
  }
  return out;
}

}  // namespace pscluster
