#include "ps/core/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/lr_schedule.h"
#include "common/status_macros.h"
#include "ps/core/optimizer_kernels.h"

namespace pscluster {
namespace {

// Rows ahead whose weights and slots are prefetched: sparse updates touch
// rows scattered over a large table, and each row would otherwise wait on
// memory (bench/sparse_bench: the update loop stalled on its first loads).
constexpr size_t kPrefetchRowsAhead = 4;

void PrefetchRow(const float* row, int64_t dim) {
  const char* p = reinterpret_cast<const char*>(row);
  const char* end = reinterpret_cast<const char*>(row + dim);
  for (; p < end; p += 64) __builtin_prefetch(p, /*rw=*/1);
}

// Calls update(g, offset) for each row, where g points at the row's gradient
// and offset is the row's first element in the weight and slot arrays `w`
// and `slots` (whose rows a few ahead it prefetches).
template <typename Update>
void ForEachRow(int64_t dim, absl::Span<const int64_t> rows, absl::Span<const float> grads,
                const float* w, absl::Span<float* const> slots, Update update) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kPrefetchRowsAhead < rows.size()) {
      const int64_t ahead = rows[i + kPrefetchRowsAhead] * dim;
      PrefetchRow(w + ahead, dim);
      for (const float* slot : slots) PrefetchRow(slot + ahead, dim);
    }
    update(grads.data() + static_cast<int64_t>(i) * dim, rows[i] * dim);
  }
}

// An optimizer whose update is scaled by a learning rate, which a
// schedule may vary per update: ApplyRows applies at the configured rate,
// ApplyRowsAtRate at the one given.
class RateOptimizer : public Optimizer {
 public:
  explicit RateOptimizer(float lr) : lr_(lr) {}
  void ApplyRows(int64_t step, int64_t dim, absl::Span<const int64_t> rows,
                 absl::Span<const float> grads, float* w,
                 absl::Span<float* const> slots) const final {
    ApplyRowsAtRate(lr_, step, dim, rows, grads, w, slots);
  }

 private:
  const float lr_;
};

class Sgd : public RateOptimizer {
 public:
  explicit Sgd(float lr) : RateOptimizer(lr) {}
  std::vector<std::string> SlotNames() const override { return {}; }
  void ApplyRowsAtRate(float lr, int64_t, int64_t dim, absl::Span<const int64_t> rows,
                       absl::Span<const float> grads, float* w,
                       absl::Span<float* const> slots) const override {
    ForEachRow(dim, rows, grads, w, slots,
               [&](const float* g, int64_t off) { kernels::SgdUpdate(lr, g, w + off, dim); });
  }
};

class Momentum : public RateOptimizer {
 public:
  Momentum(float lr, float momentum, bool nesterov)
      : RateOptimizer(lr), momentum_(momentum), nesterov_(nesterov) {}
  std::vector<std::string> SlotNames() const override { return {"momentum"}; }
  void ApplyRowsAtRate(float lr, int64_t, int64_t dim, absl::Span<const int64_t> rows,
                       absl::Span<const float> grads, float* w,
                       absl::Span<float* const> slots) const override {
    ForEachRow(dim, rows, grads, w, slots, [&](const float* g, int64_t off) {
      kernels::MomentumUpdate(lr, momentum_, nesterov_, g, slots[0] + off, w + off, dim);
    });
  }

 private:
  const float momentum_;
  const bool nesterov_;
};

class Adagrad : public RateOptimizer {
 public:
  Adagrad(float lr, float initial_accumulator, float epsilon)
      : RateOptimizer(lr), initial_accumulator_(initial_accumulator), epsilon_(epsilon) {}
  std::vector<std::string> SlotNames() const override { return {"accumulator"}; }
  float SlotInitialValue(int) const override { return initial_accumulator_; }
  void ApplyRowsAtRate(float lr, int64_t, int64_t dim, absl::Span<const int64_t> rows,
                       absl::Span<const float> grads, float* w,
                       absl::Span<float* const> slots) const override {
    ForEachRow(dim, rows, grads, w, slots, [&](const float* g, int64_t off) {
      kernels::AdagradUpdate(lr, epsilon_, g, slots[0] + off, w + off, dim);
    });
  }

 private:
  const float initial_accumulator_;
  const float epsilon_;
};

class Adam : public RateOptimizer {
 public:
  Adam(float lr, float beta1, float beta2, float epsilon)
      : RateOptimizer(lr), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}
  std::vector<std::string> SlotNames() const override { return {"m", "v"}; }
  void ApplyRowsAtRate(float lr, int64_t step, int64_t dim, absl::Span<const int64_t> rows,
                       absl::Span<const float> grads, float* w,
                       absl::Span<float* const> slots) const override {
    // Bias correction in double: 1 - beta^t loses precision in float. On a
    // sparse update `step` is the variable's update count, not the row's (as
    // in TF's lazy Adam).
    const double t = static_cast<double>(step);
    const float lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(double{beta2_}, t)) /
                                          (1.0 - std::pow(double{beta1_}, t)));
    ForEachRow(dim, rows, grads, w, slots, [&](const float* g, int64_t off) {
      kernels::AdamUpdate(lr_t, beta1_, beta2_, epsilon_, g, slots[0] + off, slots[1] + off,
                          w + off, dim);
    });
  }

 private:
  const float beta1_;
  const float beta2_;
  const float epsilon_;
};

class Ftrl : public Optimizer {
 public:
  Ftrl(float lr, float lr_power, float l1, float l2, float beta, float initial_accumulator)
      : lr_(lr),
        lr_power_(lr_power),
        l1_(l1),
        // Keras folds beta into the l2 strength it passes to TF's kernel.
        adjusted_l2_(l2 + beta / (2.0f * lr)),
        initial_accumulator_(initial_accumulator) {}
  std::vector<std::string> SlotNames() const override { return {"accumulator", "linear"}; }
  float SlotInitialValue(int slot) const override {
    return slot == 0 ? initial_accumulator_ : 0.0f;
  }
  void ApplyRows(int64_t, int64_t dim, absl::Span<const int64_t> rows,
                 absl::Span<const float> grads, float* w,
                 absl::Span<float* const> slots) const override {
    ForEachRow(dim, rows, grads, w, slots, [&](const float* g, int64_t off) {
      kernels::FtrlUpdate(lr_, lr_power_, l1_, adjusted_l2_, g, slots[0] + off, slots[1] + off,
                          w + off, dim);
    });
  }

 private:
  const float lr_;
  const float lr_power_;
  const float l1_;
  const float adjusted_l2_;
  const float initial_accumulator_;
};

// Not a gradient step: the "gradient" is a batch statistic g, and the
// variable becomes its exponential moving average, w = momentum * w +
// (1 - momentum) * g, applied here under the variable's lock so that
// concurrent pushes each fold in their own batch (batch norm's moving mean
// and variance, common/model_variables.h). learning_rate is ignored.
class MovingAverage : public Optimizer {
 public:
  explicit MovingAverage(float momentum) : momentum_(momentum) {}
  std::vector<std::string> SlotNames() const override { return {}; }
  void ApplyRows(int64_t, int64_t dim, absl::Span<const int64_t> rows,
                 absl::Span<const float> grads, float* w,
                 absl::Span<float* const> slots) const override {
    ForEachRow(dim, rows, grads, w, slots, [&](const float* g, int64_t off) {
      float* row = w + off;
      for (int64_t i = 0; i < dim; ++i) row[i] = momentum_ * row[i] + (1.0f - momentum_) * g[i];
    });
  }

 private:
  const float momentum_;
};

absl::Status CheckRange(const std::string& type, const char* field, float value, bool ok,
                        const char* want) {
  if (ok && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer ", type, ": ", field, " must be ", want, ", got ", value));
}

bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }

absl::StatusOr<std::unique_ptr<Optimizer>> CreateFtrl(const OptimizerProto& p) {
  const std::string& t = p.type();
  for (const absl::Status& s :
       {CheckRange(t, "learning_rate_power", p.learning_rate_power(), p.learning_rate_power() <= 0,
                   "<= 0"),
        CheckRange(t, "l1", p.l1(), p.l1() >= 0, ">= 0"),
        CheckRange(t, "l2", p.l2(), p.l2() >= 0, ">= 0"),
        CheckRange(t, "beta", p.beta(), p.beta() >= 0, ">= 0"),
        CheckRange(t, "initial_accumulator_value", p.initial_accumulator_value(),
                   p.initial_accumulator_value() >= 0, ">= 0")}) {
    if (!s.ok()) return s;
  }
  return std::make_unique<Ftrl>(p.learning_rate(), p.learning_rate_power(), p.l1(), p.l2(),
                                p.beta(), p.initial_accumulator_value());
}

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

void Optimizer::Apply(int64_t step, absl::Span<const float> grad, absl::Span<float> weights,
                      OptimizerSlots* slots) const {
  std::vector<float*> slot_data;
  slot_data.reserve(slots->size());
  for (std::vector<float>& slot : *slots) slot_data.push_back(slot.data());
  const int64_t row = 0;
  ApplyRows(step, static_cast<int64_t>(weights.size()), absl::MakeConstSpan(&row, 1), grad,
            weights.data(), slot_data);
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerProto& p) {
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer, CreateUnscheduled(p));
  if (p.has_schedule()) {
    const std::string& t = p.type();
    if (t != "sgd" && t != "momentum" && t != "adagrad" && t != "adam") {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer ", t, ": a learning-rate schedule needs sgd, momentum, adagrad or adam"));
    }
    if (absl::Status s = ValidateLearningRateSchedule(p.schedule()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer ", t, ": ", s.message()));
    }
    optimizer->schedule_ = p.schedule();
  }
  if (p.inverse_staleness_lr()) {
    const std::string& t = p.type();
    if (t != "sgd" && t != "momentum" && t != "adagrad" && t != "adam" && t != "moving_average") {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer ", t, ": a staleness-aware rate needs sgd, momentum, adagrad or adam"));
    }
    optimizer->inverse_staleness_lr_ = true;
  }
  optimizer->learning_rate_ = p.learning_rate();
  return optimizer;
}

float Optimizer::LearningRateAt(int64_t global_step) const {
  if (!schedule_.has_value() || global_step < 0) return -1.0f;
  return static_cast<float>(pscluster::LearningRateAt(*schedule_, global_step));
}

void Optimizer::ApplyRowsAt(int64_t global_step, int64_t step, int64_t dim,
                            absl::Span<const int64_t> rows, absl::Span<const float> grads,
                            float* weights, absl::Span<float* const> slots,
                            float rate_scale) const {
  float rate = LearningRateAt(global_step);
  if (rate_scale != 1.0f) rate = (rate >= 0 ? rate : learning_rate_) * rate_scale;
  if (rate >= 0) {
    ApplyRowsAtRate(rate, step, dim, rows, grads, weights, slots);
  } else {
    ApplyRows(step, dim, rows, grads, weights, slots);
  }
}

void Optimizer::ApplyAt(int64_t global_step, int64_t step, absl::Span<const float> grad,
                        absl::Span<float> weights, OptimizerSlots* slots, float rate_scale) const {
  std::vector<float*> slot_data;
  slot_data.reserve(slots->size());
  for (std::vector<float>& slot : *slots) slot_data.push_back(slot.data());
  const int64_t row = 0;
  ApplyRowsAt(global_step, step, static_cast<int64_t>(weights.size()),
              absl::MakeConstSpan(&row, 1), grad, weights.data(), slot_data, rate_scale);
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::CreateUnscheduled(const OptimizerProto& p) {
  const std::string& t = p.type();
  if (t == "moving_average") {
    if (absl::Status s =
            CheckRange(t, "momentum", p.momentum(), InUnitInterval(p.momentum()), "in [0, 1)");
        !s.ok()) {
      return s;
    }
    return std::make_unique<MovingAverage>(p.momentum());
  }
  if (t != "sgd" && t != "momentum" && t != "adagrad" && t != "adam" && t != "ftrl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown optimizer '", t, "' (expected sgd, momentum, adagrad, adam or ftrl)"));
  }
  if (absl::Status s =
          CheckRange(t, "learning_rate", p.learning_rate(), p.learning_rate() > 0, "> 0");
      !s.ok()) {
    return s;
  }
  if (t == "sgd") return std::make_unique<Sgd>(p.learning_rate());
  if (t == "ftrl") return CreateFtrl(p);
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
