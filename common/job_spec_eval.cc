// The job spec's `eval` section (common/job_spec.h, EvalSpec):
//
//   eval: sidecar                     # inline (default) | sidecar | none
//   eval:                             # or as a mapping, with keep_best
//     mode: sidecar
//     keep_best: {metric: accuracy, mode: max}
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/job_spec_parse.h"

namespace pscluster {

const char* EvalModeName(EvalSpec::Mode m) {
  switch (m) {
    case EvalSpec::Mode::kInline:
      return "inline";
    case EvalSpec::Mode::kSidecar:
      return "sidecar";
    case EvalSpec::Mode::kNone:
      return "none";
  }
  return "?";
}

const char* EvalMetricName(EvalSpec::Metric m) {
  switch (m) {
    case EvalSpec::Metric::kLoss:
      return "loss";
    case EvalSpec::Metric::kAccuracy:
      return "accuracy";
    case EvalSpec::Metric::kAuc:
      return "auc";
  }
  return "?";
}

namespace job_spec_internal {
namespace {

EvalSpec::Mode ParseMode(const YAML::Node& n, const std::string& what) {
  const std::string v = Str(n, what);
  if (v == "inline") return EvalSpec::Mode::kInline;
  if (v == "sidecar") return EvalSpec::Mode::kSidecar;
  if (v == "none") return EvalSpec::Mode::kNone;
  Fail(n, absl::StrCat("unknown ", what, " '", v, "' (expected inline, sidecar or none)"));
}

void ParseKeepBest(const YAML::Node& n, EvalSpec* e) {
  ExpectMap(n, "eval.keep_best");
  CheckKeys(n, "eval.keep_best", {"metric", "mode"});
  const YAML::Node metric = Required(n, "metric", "eval.keep_best");
  const std::string m = Str(metric, "eval.keep_best.metric");
  if (m == "loss") {
    e->metric = EvalSpec::Metric::kLoss;
  } else if (m == "accuracy") {
    e->metric = EvalSpec::Metric::kAccuracy;
  } else if (m == "auc") {
    e->metric = EvalSpec::Metric::kAuc;
  } else {
    Fail(metric,
         absl::StrCat("unknown eval.keep_best.metric '", m, "' (expected loss, accuracy or auc)"));
  }
  e->maximize = e->metric != EvalSpec::Metric::kLoss;
  if (const YAML::Node mode = n["mode"]) {
    const std::string v = Str(mode, "eval.keep_best.mode");
    if (v == "max") {
      e->maximize = true;
    } else if (v == "min") {
      e->maximize = false;
    } else {
      Fail(mode, absl::StrCat("unknown eval.keep_best.mode '", v,
                              "' (expected min or max: whether a smaller or a larger ", m,
                              " is better)"));
    }
  }
  e->keep_best = true;
}

}  // namespace

void ParseEval(const YAML::Node& n, JobSpec* spec) {
  EvalSpec& e = spec->eval;
  if (n.IsScalar()) {
    e.mode = ParseMode(n, "eval");
  } else {
    if (!n.IsMap()) {
      Fail(n, absl::StrCat("eval must be inline, sidecar or none, or a mapping {mode, "
                           "keep_best}; got ",
                           Describe(n)));
    }
    CheckKeys(n, "eval", {"mode", "keep_best"});
    e.mode = ParseMode(Required(n, "mode", "eval"), "eval.mode");
    if (const YAML::Node kb = n["keep_best"]) {
      ParseKeepBest(kb, &e);
      if (e.mode != EvalSpec::Mode::kSidecar) {
        Fail(kb, absl::StrCat("eval.keep_best is kept by the sidecar evaluator: it needs "
                              "eval.mode: sidecar, not ",
                              EvalModeName(e.mode)));
      }
    }
  }
  if (e.mode == EvalSpec::Mode::kSidecar && spec->checkpoint.dir.empty()) {
    Fail(n, "eval: sidecar evaluates the job's checkpoints: it needs checkpoint.dir");
  }
}

}  // namespace job_spec_internal
}  // namespace pscluster
