// The job spec's `eval` section: inline | sidecar | none, and keep_best.
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

constexpr char kBase[] = R"(name: mlp
model:
  inputs: {dense: 4}
  layers: [{dense: {units: 3}}]
optimizer: {type: sgd, learning_rate: 0.1}
data:
  train: {images: tr.gz, labels: trl.gz}
  eval: {images: te.gz, labels: tel.gz}
checkpoint: {dir: ckpt}
)";

absl::StatusOr<JobSpec> Parse(const std::string& eval) {
  return ParseJobSpec(std::string(kBase) + "eval: " + eval + "\n", "job.yaml");
}

TEST(JobSpecEvalTest, DefaultIsInline) {
  auto spec = ParseJobSpec(kBase, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eval.mode, EvalSpec::Mode::kInline);
  EXPECT_FALSE(spec->eval.keep_best);
}

TEST(JobSpecEvalTest, ScalarModes) {
  for (const auto& [text, mode] :
       std::vector<std::pair<std::string, EvalSpec::Mode>>{{"inline", EvalSpec::Mode::kInline},
                                                           {"sidecar", EvalSpec::Mode::kSidecar},
                                                           {"none", EvalSpec::Mode::kNone}}) {
    auto spec = Parse(text);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->eval.mode, mode) << text;
    EXPECT_EQ(EvalModeName(mode), text);
  }
}

TEST(JobSpecEvalTest, KeepBest) {
  auto spec = Parse("{mode: sidecar, keep_best: {metric: accuracy}}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eval.mode, EvalSpec::Mode::kSidecar);
  EXPECT_TRUE(spec->eval.keep_best);
  EXPECT_EQ(spec->eval.metric, EvalSpec::Metric::kAccuracy);
  EXPECT_TRUE(spec->eval.maximize);  // accuracy: larger is better by default

  spec = Parse("{mode: sidecar, keep_best: {metric: loss}}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eval.metric, EvalSpec::Metric::kLoss);
  EXPECT_FALSE(spec->eval.maximize);

  spec = Parse("{mode: sidecar, keep_best: {metric: auc, mode: min}}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->eval.metric, EvalSpec::Metric::kAuc);
  EXPECT_FALSE(spec->eval.maximize);
}

TEST(JobSpecEvalTest, BadInputNamesTheProblem) {
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"sometimes", "unknown eval 'sometimes' (expected inline, sidecar or none)"},
           {"{mode: later}", "unknown eval.mode 'later'"},
           {"{keep_best: {metric: loss}}", "missing required key 'mode'"},
           {"{mode: sidecar, every: 3}", "unknown key 'every' in eval"},
           {"[sidecar]", "eval must be inline, sidecar or none, or a mapping"},
           {"{mode: inline, keep_best: {metric: loss}}",
            "eval.keep_best is kept by the sidecar evaluator: it needs eval.mode: sidecar"},
           {"{mode: sidecar, keep_best: {metric: f1}}",
            "unknown eval.keep_best.metric 'f1' (expected loss, accuracy or auc)"},
           {"{mode: sidecar, keep_best: {metric: loss, mode: best}}",
            "unknown eval.keep_best.mode 'best' (expected min or max"},
           {"{mode: sidecar, keep_best: {mode: max}}", "missing required key 'metric'"},
           {"{mode: sidecar, keep_best: loss}", "eval.keep_best must be a mapping"}}) {
    auto bad = Parse(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << text;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr("job.yaml:10:")) << text;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(message)) << text;
  }
}

TEST(JobSpecEvalTest, SidecarNeedsCheckpoints) {
  std::string text = kBase;
  text.replace(text.find("checkpoint: {dir: ckpt}\n"), 24, "");
  auto bad = ParseJobSpec(text + "eval: sidecar\n", "job.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("it needs checkpoint.dir"));
  auto ok = ParseJobSpec(text + "eval: none\n", "job.yaml");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

}  // namespace
}  // namespace pscluster
