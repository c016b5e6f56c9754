// Dense optimizers the parameter server applies when a gradient arrives:
// sgd, momentum, adagrad and adam, with Keras/TF update rules.
//
// An Optimizer is an immutable, validated configuration; it holds no
// per-variable state, so one instance may serve many variables and is
// thread-safe. The per-element slots (momentum's velocity, Adam's m and v,
// ...) are owned by the caller — the variable they belong to — and are
// created with NewSlots(); the caller serialises Apply() calls per variable.
#ifndef PSCLUSTER_PS_CORE_OPTIMIZER_H_
#define PSCLUSTER_PS_CORE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
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
  // beta2 outside [0, 1), initial_accumulator_value < 0, or (adagrad, adam)
  // epsilon not > 0. Unused fields are ignored.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerProto& proto);

  virtual ~Optimizer() = default;

  // Slot names in order, e.g. {"m", "v"} for adam; empty for sgd.
  virtual std::vector<std::string> SlotNames() const = 0;

  // Fresh slots for a variable of `num_elements` elements, filled with their
  // initial values (adagrad's accumulator starts at initial_accumulator_value).
  OptimizerSlots NewSlots(int64_t num_elements) const;

  // Applies one gradient to `weights`. `step` is the 1-based number of this
  // update to the variable (Adam's bias correction uses it).
  // REQUIRES: grad.size() == weights.size(); `slots` came from NewSlots() for
  // that size; no concurrent Apply on the same weights or slots.
  virtual void Apply(int64_t step, absl::Span<const float> grad, absl::Span<float> weights,
                     OptimizerSlots* slots) const = 0;

 protected:
  virtual float SlotInitialValue(int /*slot*/) const { return 0.0f; }
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_OPTIMIZER_H_
