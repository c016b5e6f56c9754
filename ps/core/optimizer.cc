#include "ps/core/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "ps/core/optimizer_kernels.h"

namespace pscluster {
namespace {

class Sgd : public Optimizer {
 public:
  explicit Sgd(float lr) : lr_(lr) {}
  std::vector<std::string> SlotNames() const override { return {}; }
  void Apply(int64_t, absl::Span<const float> grad, absl::Span<float> weights,
             OptimizerSlots*) const override {
    kernels::SgdUpdate(lr_, grad.data(), weights.data(), static_cast<int64_t>(weights.size()));
  }

 private:
  const float lr_;
};

class Momentum : public Optimizer {
 public:
  Momentum(float lr, float momentum, bool nesterov)
      : lr_(lr), momentum_(momentum), nesterov_(nesterov) {}
  std::vector<std::string> SlotNames() const override { return {"momentum"}; }
  void Apply(int64_t, absl::Span<const float> grad, absl::Span<float> weights,
             OptimizerSlots* slots) const override {
    kernels::MomentumUpdate(lr_, momentum_, nesterov_, grad.data(), (*slots)[0].data(),
                            weights.data(), static_cast<int64_t>(weights.size()));
  }

 private:
  const float lr_;
  const float momentum_;
  const bool nesterov_;
};

class Adagrad : public Optimizer {
 public:
  Adagrad(float lr, float initial_accumulator, float epsilon)
      : lr_(lr), initial_accumulator_(initial_accumulator), epsilon_(epsilon) {}
  std::vector<std::string> SlotNames() const override { return {"accumulator"}; }
  void Apply(int64_t, absl::Span<const float> grad, absl::Span<float> weights,
             OptimizerSlots* slots) const override {
    kernels::AdagradUpdate(lr_, epsilon_, grad.data(), (*slots)[0].data(), weights.data(),
                           static_cast<int64_t>(weights.size()));
  }

 protected:
  float SlotInitialValue(int) const override { return initial_accumulator_; }

 private:
  const float lr_;
  const float initial_accumulator_;
  const float epsilon_;
};

class Adam : public Optimizer {
 public:
  Adam(float lr, float beta1, float beta2, float epsilon)
      : lr_(lr), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}
  std::vector<std::string> SlotNames() const override { return {"m", "v"}; }
  void Apply(int64_t step, absl::Span<const float> grad, absl::Span<float> weights,
             OptimizerSlots* slots) const override {
    // Bias correction in double: 1 - beta^t loses precision in float.
    const double t = static_cast<double>(step);
    const double lr_t = lr_ * std::sqrt(1.0 - std::pow(static_cast<double>(beta2_), t)) /
                        (1.0 - std::pow(static_cast<double>(beta1_), t));
    kernels::AdamUpdate(static_cast<float>(lr_t), beta1_, beta2_, epsilon_, grad.data(),
                        (*slots)[0].data(), (*slots)[1].data(), weights.data(),
                        static_cast<int64_t>(weights.size()));
  }

 private:
  const float lr_;
  const float beta1_;
  const float beta2_;
  const float epsilon_;
};

absl::Status CheckRange(const std::string& type, const char* field, float value, bool ok,
                        const char* want) {
  if (ok && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer ", type, ": ", field, " must be ", want, ", got ", value));
}

bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }

}  // namespace

OptimizerSlots Optimizer::NewSlots(int64_t num_elements) const {
  const size_t n = SlotNames().size();
  OptimizerSlots slots;
  slots.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    slots.emplace_back(num_elements, SlotInitialValue(static_cast<int>(i)));
  }
  return slots;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerProto& p) {
  const std::string& t = p.type();
  if (t != "sgd" && t != "momentum" && t != "adagrad" && t != "adam") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer '", t, "' (expected sgd, momentum, adagrad or adam)"));
  }
  if (absl::Status s =
          CheckRange(t, "learning_rate", p.learning_rate(), p.learning_rate() > 0, "> 0");
      !s.ok()) {
    return s;
  }
  if (t == "sgd") return std::make_unique<Sgd>(p.learning_rate());
  if (t == "momentum") {
    if (absl::Status s =
            CheckRange(t, "momentum", p.momentum(), InUnitInterval(p.momentum()), "in [0, 1)");
        !s.ok()) {
      return s;
    }
    return std::make_unique<Momentum>(p.learning_rate(), p.momentum(), p.nesterov());
  }
  if (absl::Status s = CheckRange(t, "epsilon", p.epsilon(), p.epsilon() > 0, "> 0"); !s.ok()) {
    return s;
  }
  if (t == "adagrad") {
    if (absl::Status s = CheckRange(t, "initial_accumulator_value", p.initial_accumulator_value(),
                                    p.initial_accumulator_value() >= 0, ">= 0");
        !s.ok()) {
      return s;
    }
    return std::make_unique<Adagrad>(p.learning_rate(), p.initial_accumulator_value(), p.epsilon());
  }
  for (auto [field, value] : {std::pair<const char*, float>{"beta1", p.beta1()},
                              std::pair<const char*, float>{"beta2", p.beta2()}}) {
    if (absl::Status s = CheckRange(t, field, value, InUnitInterval(value), "in [0, 1)"); !s.ok()) {
      return s;
    }
  }
  return std::make_unique<Adam>(p.learning_rate(), p.beta1(), p.beta2(), p.epsilon());
}

}  // namespace pscluster
