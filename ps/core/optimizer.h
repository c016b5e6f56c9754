// Optimizers the parameter server applies when a gradient arrives: sgd,
// momentum, adagrad, adam and ftrl, with Keras/TF update rules; and
// moving_average (w = momentum * w + (1 - momentum) * g), the update of
// non-trainable statistics such as batch norm's moving mean and variance,
// which a job's `optimizer:` cannot name.
//
// An Optimizer is an immutable, validated configuration; it holds no
// per-variable state, so one instance may serve many variables and is
// thread-safe. The per-element slots (momentum's velocity, Adam's m and v,
// FTRL's accumulator and linear term, ...) are owned by the caller — the
// variable they belong to — and are created with NewSlots(); the caller
// serialises updates per variable.
//
// Updates are row-wise: ApplyRows() updates some rows of a row-major weight
// array and the same rows of each slot array, and a whole-variable update is
// the one-row case. Only the given rows (and their slots) change, so sparse
// updates are "lazy" as in TF's sparse kernels: Adam's moments and momentum's
// velocity of untouched rows do not decay.
#ifndef PSCLUSTER_PS_CORE_OPTIMIZER_H_
#define PSCLUSTER_PS_CORE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "protos/ps.pb.h"

namespace pscluster {

// Optimizer state of one variable: slot i has one float per variable element.
using OptimizerSlots = std::vector<std::vector<float>>;

class Optimizer {
 public:
  // Builds the optimizer described by `proto`. INVALID_ARGUMENT naming the
  // field for an unknown type, learning_rate not > 0, momentum, beta1 or
  // beta2 outside [0, 1), initial_accumulator_value < 0, (adagrad, adam)
  // epsilon not > 0, or (ftrl) learning_rate_power > 0 or l1, l2 or beta < 0.
  // Unused fields are ignored. With a learning-rate schedule
  // (OptimizerProto.schedule), also INVALID_ARGUMENT for an invalid schedule
  // (common/lr_schedule.h) or one given to ftrl or moving_average.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerProto& proto);

  virtual ~Optimizer() = default;

  // Slot names in order, e.g. {"m", "v"} for adam; empty for sgd.
  virtual std::vector<std::string> SlotNames() const = 0;

  // Initial value of every element of slot `slot` (adagrad's and ftrl's
  // accumulator start at initial_accumulator_value, the rest at 0).
  virtual float SlotInitialValue(int /*slot*/) const { return 0.0f; }

  // Fresh slots for a variable of `num_elements` elements, filled with their
  // initial values.
  OptimizerSlots NewSlots(int64_t num_elements) const;

  // Applies one gradient to some rows. Row i of `grads` (elements
  // [i * dim, (i + 1) * dim)) updates row rows[i] of `weights` (elements
  // [rows[i] * dim, (rows[i] + 1) * dim)) and the same row of every slot
  // array. `step` is the 1-based number of this update to the variable
  // (Adam's bias correction uses it).
  // REQUIRES: grads.size() == rows.size() * dim; slots.size() ==
  // SlotNames().size(); every row lies inside `weights` and each slot array;
  // rows are distinct; no concurrent update of the same rows.
  virtual void ApplyRows(int64_t step, int64_t dim, absl::Span<const int64_t> rows,
                         absl::Span<const float> grads, float* weights,
                         absl::Span<float* const> slots) const = 0;

  // Whole-variable update: ApplyRows with one row of weights.size() elements.
  // REQUIRES: grad.size() == weights.size(); `slots` came from NewSlots() for
  // that size; no concurrent Apply on the same weights or slots.
  void Apply(int64_t step, absl::Span<const float> grad, absl::Span<float> weights,
             OptimizerSlots* slots) const;

  // ApplyRows / Apply for the update of the job's 0-based `global_step`
  // (UpdateKey.global_step): at the schedule's rate for that step when the
  // optimizer has a schedule and global_step >= 0, else at the configured
  // learning_rate; either multiplied by `rate_scale` (a staleness-aware
  // rate, StalenessRateScale; optimizers without a rate, moving_average,
  // ignore it). The same REQUIRES as ApplyRows / Apply.
  void ApplyRowsAt(int64_t global_step, int64_t step, int64_t dim, absl::Span<const int64_t> rows,
                   absl::Span<const float> grads, float* weights, absl::Span<float* const> slots,
                   float rate_scale = 1.0f) const;
  void ApplyAt(int64_t global_step, int64_t step, absl::Span<const float> grad,
               absl::Span<float> weights, OptimizerSlots* slots, float rate_scale = 1.0f) const;

  // OptimizerProto.inverse_staleness_lr: pushes are applied at
  // StalenessRateScale of their measured staleness.
  bool inverse_staleness_lr() const { return inverse_staleness_lr_; }
  // 1 / max(1, staleness) (Zhang et al. 2016, "Staleness-aware Async-SGD").
  static float StalenessRateScale(int64_t staleness) {
    return staleness > 1 ? 1.0f / static_cast<float>(staleness) : 1.0f;
  }

  // The schedule's rate at `global_step`; -1 without a schedule or for a
  // negative step (then updates use the configured learning_rate).
  float LearningRateAt(int64_t global_step) const;

 protected:
  // ApplyRows at `learning_rate` instead of the configured rate. Optimizers
  // whose update scales with a rate override it; Create gives a schedule to
  // no other, so the default (ApplyRows, the rate ignored) is never asked
  // for another rate.
  virtual void ApplyRowsAtRate(float /*learning_rate*/, int64_t step, int64_t dim,
                               absl::Span<const int64_t> rows, absl::Span<const float> grads,
                               float* weights, absl::Span<float* const> slots) const {
    ApplyRows(step, dim, rows, grads, weights, slots);
  }

 private:
  static absl::StatusOr<std::unique_ptr<Optimizer>> CreateUnscheduled(const OptimizerProto& proto);

  std::optional<LearningRateScheduleProto> schedule_;
  float learning_rate_ = 0;  // OptimizerProto.learning_rate
  bool inverse_staleness_lr_ = false;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_OPTIMIZER_H_
