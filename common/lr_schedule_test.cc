#include "common/lr_schedule.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

using P = LearningRateScheduleProto;

P Schedule(P::Decay decay, double initial, int64_t warmup_steps = 0, double warmup_from = 0) {
  P s;
  s.set_decay(decay);
  s.set_initial(initial);
  s.set_warmup_steps(warmup_steps);
  s.set_warmup_from(warmup_from);
  return s;
}

P Cosine(double initial, int64_t decay_steps, double alpha, int64_t warmup_steps = 0,
         double warmup_from = 0) {
  P s = Schedule(P::COSINE, initial, warmup_steps, warmup_from);
  s.set_decay_steps(decay_steps);
  s.set_alpha(alpha);
  return s;
}

P Exponential(double initial, int64_t decay_steps, double rate, bool staircase) {
  P s = Schedule(P::EXPONENTIAL, initial);
  s.set_decay_steps(decay_steps);
  s.set_decay_rate(rate);
  s.set_staircase(staircase);
  return s;
}

P Piecewise(std::vector<int64_t> boundaries, std::vector<double> values, int64_t warmup_steps = 0) {
  P s = Schedule(P::PIECEWISE_CONSTANT, values[0], warmup_steps);
  for (int64_t b : boundaries) s.add_boundaries(b);
  for (double v : values) s.add_values(v);
  return s;
}

struct Point {
  int64_t step;
  double rate;  // computed by hand
};

struct Case {
  std::string name;
  P schedule;
  std::vector<Point> points;
};

TEST(LearningRateScheduleTest, RatesAtStepsMatchHandComputedValues) {
  const std::vector<Case> cases = {
      {"constant", Schedule(P::CONSTANT, 0.1), {{0, 0.1}, {1, 0.1}, {1000000, 0.1}}},
      {"warmup from 0, then constant",
       Schedule(P::CONSTANT, 0.1, 10),
       {{-3, 0.0}, {0, 0.0}, {5, 0.05}, {9, 0.09}, {10, 0.1}, {11, 0.1}, {500, 0.1}}},
      {"warmup from a start rate",
       Schedule(P::CONSTANT, 0.1, 4, 0.02),
       {{0, 0.02}, {2, 0.06}, {3, 0.08}, {4, 0.1}}},
      // Keras CosineDecay(1.0, decay_steps=100).
      {"cosine",
       Cosine(1.0, 100, 0.0),
       {{0, 1.0},
        {25, 0.8535533905932737},
        {50, 0.5},
        {75, 0.1464466094067262},
        {100, 0.0},
        {250, 0.0}}},
      // alpha is a floor as a fraction of the peak.
      {"cosine with alpha", Cosine(2.0, 100, 0.1), {{0, 2.0}, {50, 1.1}, {100, 0.2}, {101, 0.2}}},
      // Keras CosineDecay(0.0, 100, warmup_target=0.2, warmup_steps=10): the
      // decay counts steps after warmup and ends at warmup + decay_steps.
      {"warmup then cosine",
       Cosine(0.2, 100, 0.0, 10),
       {{0, 0.0},
        {1, 0.02},
        {5, 0.1},
        {9, 0.18},
        {10, 0.2},
        {60, 0.1},
        {109, 0.2 * 0.5 * (1 + std::cos(M_PI * 0.99))},
        {110, 0.0},
        {100000, 0.0}}},
      // Keras ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5).
      {"exponential",
       Exponential(0.1, 10, 0.5, false),
       {{0, 0.1}, {5, 0.07071067811865475}, {10, 0.05}, {25, 0.017677669529663688}}},
      {"exponential staircase (step decay)",
       Exponential(0.1, 10, 0.5, true),
       {{0, 0.1}, {9, 0.1}, {10, 0.05}, {19, 0.05}, {25, 0.025}}},
      // Keras PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1]).
      {"piecewise constant",
       Piecewise({10, 20}, {1.0, 0.5, 0.1}),
       {{0, 1.0}, {10, 1.0}, {11, 0.5}, {20, 0.5}, {21, 0.1}, {1000, 0.1}}},
      {"warmup then piecewise constant (boundaries after warmup)",
       Piecewise({10, 20}, {1.0, 0.5, 0.1}, 5),
       {{0, 0.0}, {4, 0.8}, {5, 1.0}, {15, 1.0}, {16, 0.5}, {26, 0.1}}},
      // Goyal et al.: 4 replicas, base 0.1, warmup from 0 to 0.4.
      {"scaled by 4 replicas",
       ScaleLearningRateSchedule(Cosine(0.1, 100, 0.0, 10), 4.0),
       {{0, 0.0}, {5, 0.2}, {10, 0.4}, {60, 0.2}, {110, 0.0}}},
      {"scaled piecewise",
       ScaleLearningRateSchedule(Piecewise({10}, {0.1, 0.01}), 2.0),
       {{0, 0.2}, {11, 0.02}}},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(ValidateLearningRateSchedule(c.schedule).ok())
        << c.name << ": " << ValidateLearningRateSchedule(c.schedule);
    for (const Point& p : c.points) {
      EXPECT_NEAR(LearningRateAt(c.schedule, p.step), p.rate, 1e-12)
          << c.name << " at step " << p.step;
    }
  }
}

TEST(LearningRateScheduleTest, InvalidSchedulesNameTheField) {
  struct Bad {
    P schedule;
    std::string message;
  };
  std::vector<Bad> cases;
  cases.push_back({Schedule(P::CONSTANT, 0.0), "learning_rate.initial must be finite and > 0"});
  cases.push_back({Schedule(P::CONSTANT, INFINITY), "learning_rate.initial"});
  cases.push_back({Schedule(P::CONSTANT, 0.1, -1), "learning_rate.warmup_steps must be in [0, "});
  cases.push_back({Schedule(P::CONSTANT, 0.1, kMaxScheduleSteps + 1), "warmup_steps"});
  cases.push_back({Schedule(P::CONSTANT, 0.1, 5, -0.1), "learning_rate.warmup_from must be"});
  cases.push_back({Cosine(0.1, 0, 0.0), "learning_rate.decay_steps must be in [1, "});
  cases.push_back({Cosine(0.1, 10, 1.5), "learning_rate.alpha must be in [0, 1], got 1.5"});
  cases.push_back({Exponential(0.1, 10, 0.0, false), "learning_rate.decay_rate must be in (0, 1]"});
  cases.push_back({Exponential(0.1, 10, 1.5, false), "decay_rate"});
  cases.push_back({Exponential(0.1, 0, 0.5, false), "decay_steps"});
  cases.push_back({Piecewise({}, {0.1}), "learning_rate.boundaries must be a list of 1 to"});
  cases.push_back({Piecewise({10, 10}, {0.1, 0.05, 0.01}), "strictly increasing"});
  cases.push_back({Piecewise({-1}, {0.1, 0.05}), "strictly increasing"});
  cases.push_back({Piecewise({10}, {0.1, 0.0}), "learning_rate.values[1] must be finite and > 0"});
  P short_values = Piecewise({10}, {0.1, 0.05});
  short_values.mutable_values()->RemoveLast();
  cases.push_back({short_values, "values must have one more element than boundaries (2), got 1"});
  P mismatch = Piecewise({10}, {0.1, 0.05});
  mismatch.set_initial(0.2);
  cases.push_back({mismatch, "learning_rate.initial (0.2) must equal values[0] (0.1)"});
  for (const Bad& c : cases) {
    const absl::Status s = ValidateLearningRateSchedule(c.schedule);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
  }
}

TEST(LearningRateScheduleTest, DescribesConstantsAndSchedules) {
  OptimizerProto o;
  o.set_learning_rate(0.001f);
  EXPECT_EQ(DescribeLearningRate(o), "0.001");
  *o.mutable_schedule() = Cosine(0.2, 1000, 0.01, 100);
  EXPECT_EQ(DescribeLearningRate(o),
            "0.2, cosine decay over 1000 steps to 0.002, after 100 warmup steps from 0");
  *o.mutable_schedule() = Exponential(0.1, 10, 0.5, true);
  EXPECT_EQ(DescribeLearningRate(o), "0.1, x0.5 every 10 steps");
  *o.mutable_schedule() = Piecewise({10, 20}, {1.0, 0.5, 0.1});
  EXPECT_EQ(DescribeLearningRate(o), "1, piecewise constant 0.5 after step 10, 0.1 after step 20");
}

}  // namespace
}  // namespace pscluster
