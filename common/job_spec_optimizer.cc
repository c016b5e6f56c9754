// The `optimizer` part of a job spec: the optimizer and its options, and
// the learning rate, a number or a schedule (common/lr_schedule.h).
#include <cmath>

#include "common/job_spec_parse.h"
#include "common/lr_schedule.h"

namespace pscluster {
namespace job_spec_internal {
namespace {

// optimizer.learning_rate: a number (a constant rate) or a schedule mapping
// (README "Learning rate"): o->learning_rate is then the schedule's peak
// and o->schedule the schedule, both before scale_with_replicas.
void ParseLearningRate(const YAML::Node& n, OptimizerProto* o, bool* scale_with_replicas) {
  const std::string where = "optimizer.learning_rate";
  if (!n.IsMap()) {
    o->set_learning_rate(Positive(n, where));
    return;
  }
  CheckKeys(n, where,
            {"initial", "warmup_steps", "warmup_from", "decay", "decay_steps", "decay_rate",
             "staircase", "step_size", "boundaries", "values", "alpha", "final",
             "scale_with_replicas"});
  using P = LearningRateScheduleProto;
  P s;
  const std::string decay = n["decay"] ? Str(n["decay"], where + ".decay") : "constant";
  // The keys each decay takes.
  std::set<std::string> takes;
  if (decay == "cosine") {
    s.set_decay(P::COSINE);
    takes = {"decay_steps", "alpha", "final"};
  } else if (decay == "exponential") {
    s.set_decay(P::EXPONENTIAL);
    takes = {"decay_steps", "decay_rate", "staircase"};
  } else if (decay == "step") {
    takes = {"step_size", "decay_rate", "boundaries", "values"};
  } else if (decay != "constant") {
    Fail(n["decay"], absl::StrCat("unknown ", where, ".decay '", decay,
                                  "' (expected constant, cosine, exponential or step)"));
  }
  for (const char* key : {"decay_steps", "decay_rate", "staircase", "step_size", "boundaries",
                          "values", "alpha", "final"}) {
    if (n[key] && !takes.count(key)) {
      Fail(n[key], absl::StrCat(where, ": decay '", decay, "' has no option '", key, "'"));
    }
  }
  auto steps = [&](const YAML::Node& v, const std::string& what, int64_t min_value) {
    return Int(v, what, min_value, kMaxScheduleSteps);
  };
  auto rate = [&](const YAML::Node& v, const std::string& what) {
    const double r = Num(v, what);
    if (!(std::isfinite(r) && r > 0)) Fail(v, absl::StrCat(what, " must be > 0, got ", r));
    return r;
  };
  auto decay_rate = [&]() {
    const YAML::Node v = Required(n, "decay_rate", where);
    const double r = Num(v, where + ".decay_rate");
    if (!(r > 0 && r <= 1)) Fail(v, absl::StrCat(where, ".decay_rate must be in (0, 1], got ", r));
    return r;
  };
  if (n["warmup_steps"]) s.set_warmup_steps(steps(n["warmup_steps"], where + ".warmup_steps", 0));
  if (YAML::Node f = n["warmup_from"]) {
    const double v = Num(f, where + ".warmup_from");
    if (!(std::isfinite(v) && v >= 0)) Fail(f, absl::StrCat(where, ".warmup_from must be >= 0, got ", v));
    if (s.warmup_steps() == 0) Fail(f, absl::StrCat(where, ".warmup_from needs warmup_steps > 0"));
    s.set_warmup_from(v);
  }
  if (decay == "step" && (n["boundaries"] || n["values"])) {
    // Keras' PiecewiseConstantDecay: absolute rates, the first the peak.
    if (n["step_size"] || n["decay_rate"]) {
      Fail(n, absl::StrCat(where, ": decay 'step' takes step_size and decay_rate, or boundaries "
                                  "and values, not both"));
    }
    if (n["initial"]) {
      Fail(n["initial"], absl::StrCat(where, ".initial is not used with values (the rate starts "
                                             "at values[0])"));
    }
    const YAML::Node b = Required(n, "boundaries", where);
    const YAML::Node v = Required(n, "values", where);
    if (!b.IsSequence() || b.size() == 0 || b.size() > kMaxScheduleBoundaries) {
      Fail(b, absl::StrCat(where, ".boundaries must be a list of 1 to ", kMaxScheduleBoundaries,
                           " steps"));
    }
    if (!v.IsSequence() || v.size() != b.size() + 1) {
      Fail(v, absl::StrCat(where, ".values must be a list of ", b.size() + 1,
                           " rates (one more than boundaries)"));
    }
    for (size_t i = 0; i < b.size(); ++i) {
      const std::string what = absl::StrCat(where, ".boundaries[", i, "]");
      s.add_boundaries(steps(b[i], what, i == 0 ? 0 : s.boundaries(i - 1) + 1));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      s.add_values(rate(v[i], absl::StrCat(where, ".values[", i, "]")));
    }
    s.set_decay(P::PIECEWISE_CONSTANT);
    s.set_initial(s.values(0));
  } else {
    s.set_initial(rate(Required(n, "initial", where), where + ".initial"));
  }
  if (decay == "step" && s.decay() != P::PIECEWISE_CONSTANT) {
    // Step decay: x decay_rate every step_size steps (ExponentialDecay with
    // staircase).
    s.set_decay(P::EXPONENTIAL);
    s.set_staircase(true);
    s.set_decay_steps(steps(Required(n, "step_size", where), where + ".step_size", 1));
    s.set_decay_rate(decay_rate());
  }
  if (decay == "exponential") {
    s.set_decay_steps(steps(Required(n, "decay_steps", where), where + ".decay_steps", 1));
    s.set_decay_rate(decay_rate());
    if (n["staircase"]) s.set_staircase(Bool(n["staircase"], where + ".staircase"));
  }
  if (decay == "cosine") {
    s.set_decay_steps(steps(Required(n, "decay_steps", where), where + ".decay_steps", 1));
    if (n["alpha"] && n["final"]) {
      Fail(n["final"], absl::StrCat(where, ": give alpha (a fraction of initial) or final (a "
                                           "rate), not both"));
    }
    if (YAML::Node a = n["alpha"]) {
      const double v = Num(a, where + ".alpha");
      if (!(v >= 0 && v <= 1)) Fail(a, absl::StrCat(where, ".alpha must be in [0, 1], got ", v));
      s.set_alpha(v);
    }
    if (YAML::Node f = n["final"]) {
      const double v = Num(f, where + ".final");
      if (!(v >= 0 && v <= s.initial())) {
        Fail(f, absl::StrCat(where, ".final must be in [0, initial (", s.initial(), ")], got ", v));
      }
      s.set_alpha(v / s.initial());
    }
  }
  if (YAML::Node r = n["scale_with_replicas"]) {
    const std::string v = Str(r, where + ".scale_with_replicas");
    if (v == "linear") *scale_with_replicas = true;
    else if (v != "none") Fail(r, absl::StrCat("unknown ", where, ".scale_with_replicas '", v, "' (expected none or linear)"));
  }
  if (o->type() == "ftrl" && !(s.decay() == P::CONSTANT && s.warmup_steps() == 0)) {
    Fail(n, "optimizer 'ftrl' takes a constant learning_rate (its update divides by the rate)");
  }
  if (absl::Status st = ValidateLearningRateSchedule(s); !st.ok()) {
    Fail(n, absl::StrCat("optimizer.", st.message()));
  }
  o->set_learning_rate(static_cast<float>(s.initial()));
  // A constant rate needs no schedule on the wire.
  if (s.decay() != P::CONSTANT || s.warmup_steps() > 0) *o->mutable_schedule() = s;
}

}  // namespace

void ParseOptimizer(const YAML::Node& n, OptimizerProto* o, bool* scale_with_replicas) {
  CheckKeys(n, "optimizer", {"type", "learning_rate", "momentum", "nesterov",
                             "initial_accumulator_value", "beta1", "beta2", "epsilon",
                             "learning_rate_power", "l1", "l2", "beta"});
  YAML::Node type = Required(n, "type", "optimizer");
  o->set_type(Str(type, "optimizer.type"));
  o->set_learning_rate(0.01f);
  o->set_momentum(0.9f);
  o->set_initial_accumulator_value(0.1f);
  o->set_beta1(0.9f);
  o->set_beta2(0.999f);
  o->set_epsilon(1e-7f);
  o->set_learning_rate_power(-0.5f);
  if (o->type() == "adam") o->set_learning_rate(0.001f);
  const std::string& t = o->type();
  if (t != "sgd" && t != "momentum" && t != "adagrad" && t != "adam" && t != "ftrl") {
    Fail(type, absl::StrCat("unknown optimizer '", t,
                            "' (expected sgd, momentum, adagrad, adam or ftrl)"));
  }
  auto only_for = [&](const char* key, std::initializer_list<const char*> types) {
    if (!n[key]) return false;
    for (const char* ok : types) {
      if (t == ok) return true;
    }
    Fail(n[key], absl::StrCat("optimizer '", t, "' has no option '", key, "'"));
  };
  if (n["learning_rate"]) ParseLearningRate(n["learning_rate"], o, scale_with_replicas);
  if (only_for("momentum", {"momentum"})) {
    const double m = Num(n["momentum"], "optimizer.momentum");
    if (m < 0 || m >= 1) Fail(n["momentum"], "optimizer.momentum must be in [0, 1)");
    o->set_momentum(static_cast<float>(m));
  }
  if (only_for("nesterov", {"momentum"})) o->set_nesterov(Bool(n["nesterov"], "optimizer.nesterov"));
  if (only_for("initial_accumulator_value", {"adagrad", "ftrl"})) {
    o->set_initial_accumulator_value(
        Positive(n["initial_accumulator_value"], "optimizer.initial_accumulator_value"));
  }
  for (const char* key : {"beta1", "beta2"}) {
    if (only_for(key, {"adam"})) {
      const double b = Num(n[key], absl::StrCat("optimizer.", key));
      if (b < 0 || b >= 1) Fail(n[key], absl::StrCat("optimizer.", key, " must be in [0, 1)"));
      if (std::string(key) == "beta1") o->set_beta1(static_cast<float>(b));
      else o->set_beta2(static_cast<float>(b));
    }
  }
  if (only_for("epsilon", {"adam", "adagrad"})) o->set_epsilon(Positive(n["epsilon"], "optimizer.epsilon"));
  if (only_for("learning_rate_power", {"ftrl"})) {
    const double p = Num(n["learning_rate_power"], "optimizer.learning_rate_power");
    if (p > 0) Fail(n["learning_rate_power"], "optimizer.learning_rate_power must be <= 0");
    o->set_learning_rate_power(static_cast<float>(p));
  }
  for (const char* key : {"l1", "l2", "beta"}) {
    if (only_for(key, {"ftrl"})) {
      const double v = Num(n[key], absl::StrCat("optimizer.", key));
      if (v < 0) Fail(n[key], absl::StrCat("optimizer.", key, " must be >= 0"));
      const std::string k = key;
      if (k == "l1") o->set_l1(static_cast<float>(v));
      else if (k == "l2") o->set_l2(static_cast<float>(v));
      else o->set_beta(static_cast<float>(v));
    }
  }
}

}  // namespace job_spec_internal
}  // namespace pscluster
