// Learning-rate schedules: the rate of an update as a pure function of its
// global step, the same on every strategy and on every process that applies
// updates (the PS for parameter_server and one_device; a worker for the
// synchronous strategies to come).
//
// A schedule (LearningRateScheduleProto, protos/ps.proto) follows TF/Keras:
//   step < warmup_steps:  warmup_from + (initial - warmup_from) * step / warmup_steps
//   then, with d = step - warmup_steps (the steps since warmup ended):
//   CONSTANT            initial
//   COSINE              initial * ((1 - alpha) * 0.5 * (1 + cos(pi * min(d, decay_steps)
//                                   / decay_steps)) + alpha)
//                       (keras.optimizers.schedules.CosineDecay, with warmup_target)
//   EXPONENTIAL         initial * decay_rate ^ (d / decay_steps), the exponent
//                       floored when staircase (ExponentialDecay)
//   PIECEWISE_CONSTANT  values[0] while d <= boundaries[0], values[i] while
//                       boundaries[i-1] < d <= boundaries[i], values[n] after
//                       (PiecewiseConstantDecay)
// With warmup_steps 0 each is exactly its Keras counterpart.
//
// Pure functions; thread-safe.
#ifndef PSCLUSTER_COMMON_LR_SCHEDULE_H_
#define PSCLUSTER_COMMON_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "protos/ps.pb.h"

namespace pscluster {

// The largest warmup_steps, decay_steps or boundary a schedule may name.
inline constexpr int64_t kMaxScheduleSteps = int64_t{1} << 40;
// The most boundaries of a piecewise-constant schedule.
inline constexpr int kMaxScheduleBoundaries = 1000;

// OK, or INVALID_ARGUMENT naming the field ("learning_rate.decay_steps must
// be >= 1, got 0") for: a rate (initial, values) not finite and > 0;
// warmup_from not finite and >= 0; warmup_steps outside [0,
// kMaxScheduleSteps]; COSINE or EXPONENTIAL without decay_steps in [1,
// kMaxScheduleSteps]; alpha outside [0, 1]; EXPONENTIAL decay_rate outside
// (0, 1]; PIECEWISE_CONSTANT boundaries empty, past kMaxScheduleBoundaries,
// negative or not strictly increasing, values not one more than boundaries,
// or initial != values[0].
absl::Status ValidateLearningRateSchedule(const LearningRateScheduleProto& schedule);

// The rate at 0-based global step `step` (a negative step counts as 0).
// REQUIRES: ValidateLearningRateSchedule(schedule) is OK.
double LearningRateAt(const LearningRateScheduleProto& schedule, int64_t step);

// `schedule` with every rate from the peak on (initial, values) multiplied
// by `factor`: the linear scaling rule of Goyal et al. ("scale_with_replicas:
// linear", factor = replicas). warmup_from is a starting rate and is kept.
LearningRateScheduleProto ScaleLearningRateSchedule(LearningRateScheduleProto schedule,
                                                    double factor);

// One line for status and describe: "0.001" for a constant rate, else e.g.
// "0.2, cosine decay over 1000 steps to 0.002, after 100 warmup steps from 0".
std::string DescribeLearningRate(const OptimizerProto& optimizer);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_LR_SCHEDULE_H_
