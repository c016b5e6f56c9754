// Parse rules of the feature-engineering fields: csv delimiter and header,
// dense column transforms, categorical boundaries and feature crosses.
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A csv job: line 4 holds the categorical feature (`feature`), line 12 the
// train source's extra keys (`source`), and the eval source is plain.
std::string Job(const std::string& feature, const std::string& source) {
  return absl::StrCat(R"(model:
  inputs:
    categorical:
      - )", feature, R"(
    dense: 1
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
data:
  train:
    format: csv
    path: a.tsv.gz
    columns: [{y: int}, {n: int}, {x: float}, {s: string}, {t: string}]
    )", source, R"(
  eval:
    format: csv
    path: b.csv
    columns: [{y: int}, {n: int}, {x: float}, {s: string}, {t: string}]
    label: {column: y}
    dense_columns: [x]
optimizer: {type: sgd}
)");
}

constexpr char kLabelled[] = "label: {column: y}\n    dense_columns: [x]";

TEST(JobSpecFeaturesTest, ParsesDelimiterHeaderAndTransforms) {
  std::string yaml = Job("{name: s, hashed: true}",
                         "label: {column: y}\n    delimiter: \"\\t\"\n    header: false\n"
                         "    dense_columns: [{column: x, transform: log1p}]");
  // The eval source transforms alike (TrainAndEvalTransformAlike).
  yaml.replace(yaml.rfind("dense_columns: [x]"), 18,
               "dense_columns: [{column: x, transform: log1p}]");
  auto spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.train.delimiter, '\t');
  EXPECT_FALSE(spec->data.train.header);
  EXPECT_THAT(spec->data.train.dense_columns, ElementsAre("x"));
  EXPECT_THAT(spec->data.train.dense_transforms,
              ElementsAre(DataSourceSpec::DenseTransform::kLog1p));
  EXPECT_THAT(spec->data.eval.dense_transforms,
              ElementsAre(DataSourceSpec::DenseTransform::kLog1p));
  // The defaults, and the plain string form of a dense column.
  EXPECT_EQ(spec->data.eval.delimiter, ',');
  EXPECT_TRUE(spec->data.eval.header);
  spec = ParseJobSpec(Job("{name: s, hashed: true}", kLabelled), "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->data.train.dense_transforms,
              ElementsAre(DataSourceSpec::DenseTransform::kNone));
}

TEST(JobSpecFeaturesTest, TrainAndEvalTransformAlike) {
  auto spec = ParseJobSpec(
      Job("{name: s, hashed: true}",
          "label: {column: y}\n    dense_columns: [{column: x, transform: log1p}]"),
      "bad.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("bad.yaml:20:21: data.eval.dense_columns[0] ('x') has another transform "
                        "than data.train.dense_columns[0] ('x')"));
}

TEST(JobSpecFeaturesTest, PathMayListFiles) {
  std::string yaml = Job("{name: s, hashed: true}", kLabelled);
  yaml.replace(yaml.find("path: a.tsv.gz"), 14, "path: [a.tsv.gz, b.tsv.gz]");
  auto spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.train.path, "a.tsv.gz");
  EXPECT_THAT(spec->data.train.paths, ElementsAre("a.tsv.gz", "b.tsv.gz"));
  EXPECT_THAT(DataFiles(*spec), ElementsAre("a.tsv.gz", "b.tsv.gz", "b.csv"));
  EXPECT_EQ(NamedDataFiles(*spec)[1].field, "data.train.path[1]");
  EXPECT_TRUE(spec->data.eval.paths.empty());

  yaml.replace(yaml.find("[a.tsv.gz, b.tsv.gz]"), 20, "[]");
  spec = ParseJobSpec(yaml, "bad.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("bad.yaml:11:11: data.train.path must name at least one file"));
}

TEST(JobSpecFeaturesTest, ParsesCrossesAndBoundaries) {
  auto spec = ParseJobSpec(
      Job("{name: s_x_n, cross: [s, n], hashed: true, boundaries: [0, 1, 3]}", kLabelled),
      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const CategoricalFeatureSpec& f = spec->model.categorical[0];
  EXPECT_THAT(f.cross, ElementsAre("s", "n"));
  EXPECT_TRUE(f.column.empty());
  EXPECT_THAT(f.boundaries, ElementsAre(0, 1, 3));

  spec = ParseJobSpec(Job("{name: n_bucket, column: n, vocab_size: 4, boundaries: [0, 1, 3]}",
                          kLabelled),
                      "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.categorical[0].column, "n");
  EXPECT_THAT(spec->model.categorical[0].boundaries, ElementsAre(0, 1, 3));
}

struct BadCase {
  std::string feature;
  std::string source;
  const char* where;
  const char* message;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.message; }

class JobSpecFeaturesErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(JobSpecFeaturesErrorTest, NamesLineColumnAndProblem) {
  auto spec = ParseJobSpec(Job(GetParam().feature, GetParam().source), "bad.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(spec.status())) << spec.status();
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().where));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().message));
}

const char kOk[] = "{name: s, hashed: true}";

INSTANTIATE_TEST_SUITE_P(
    Cases, JobSpecFeaturesErrorTest,
    ::testing::Values(
        // csv layout
        BadCase{kOk, "label: {column: y}\n    dense_columns: [x]\n    delimiter: \";;\"",
                "bad.yaml:15:16", "delimiter must be one byte"},
        BadCase{kOk, "label: {column: y}\n    dense_columns: [x]\n    delimiter: \"\\\"\"",
                "bad.yaml:15:16", "delimiter must be one byte"},
        BadCase{kOk, "label: {column: y}\n    dense_columns: [x]\n    header: nope",
                "bad.yaml:15:13", "header"},
        // dense transforms
        BadCase{kOk, "label: {column: y}\n    dense_columns: [{column: x, transform: log2}]",
                "bad.yaml:14:44", "unknown transform 'log2' (expected none or log1p)"},
        BadCase{kOk, "label: {column: y}\n    dense_columns: [{column: x, scale: 2}]",
                "bad.yaml:14:33", "unknown key 'scale'"},
        BadCase{kOk, "label: {column: y}\n    dense_columns: [{transform: log1p}]",
                "bad.yaml:14:21", "missing required key 'column'"},
        BadCase{kOk, "label: {column: y}\n    dense_columns: [{column: s, transform: log1p}]",
                "bad.yaml:14:30", "dense column 's' must be int or float"},
        BadCase{kOk, "label: {column: y}\n    dense_columns: [{column: zz}]",
                "bad.yaml:14:30", "column 'zz' is not among data.train.columns"},
        // boundaries
        BadCase{"{name: b, column: n, hashed: true, boundaries: [1, 1]}", kLabelled,
                "bad.yaml:4:60", "boundaries must be strictly increasing"},
        BadCase{"{name: b, column: n, hashed: true, boundaries: []}", kLabelled, "bad.yaml:4:56",
                "boundaries must be a non-empty list of numbers"},
        BadCase{"{name: b, column: n, hashed: true, boundaries: [0, x]}", kLabelled,
                "bad.yaml:4:60", "boundaries[1]"},
        BadCase{"{name: b, column: n, hashed: true, bucket_width: 2, boundaries: [0]}", kLabelled,
                "bad.yaml:4:73", "has both bucket_width and boundaries"},
        BadCase{"{name: b, column: n, vocab_size: 3, boundaries: [0, 1, 2]}", kLabelled,
                "bad.yaml:4:57", "boundaries give bucket ids 0..3, outside vocab_size 3"},
        BadCase{"{name: b, column: s, hashed: true, boundaries: [0]}", kLabelled, "bad.yaml:9:3",
                "feature 'b' is bucketized but column 's' is a string"},
        // crosses
        BadCase{"{name: c, cross: [s], hashed: true}", kLabelled, "bad.yaml:4:26",
                "cross must be a list of two or more columns"},
        BadCase{"{name: c, cross: s, hashed: true}", kLabelled, "bad.yaml:4:26",
                "cross must be a list of two or more columns"},
        BadCase{"{name: c, cross: [s, s], hashed: true}", kLabelled, "bad.yaml:4:30",
                "cross names column 's' twice"},
        BadCase{"{name: c, column: s, cross: [s, t], hashed: true}", kLabelled, "bad.yaml:4:27",
                "has both column and cross"},
        BadCase{"{name: c, cross: [s, t], hashed: true, separator: \"|\"}", kLabelled,
                "bad.yaml:4:59", "a cross reads single-valued columns"},
        BadCase{"{name: c, cross: [s, zz], hashed: true}", kLabelled, "bad.yaml:9:3",
                "feature 'c' crosses column 'zz', which the csv data does not declare"},
        BadCase{"{name: c, cross: [s, t], hashed: true, boundaries: [0]}", kLabelled,
                "bad.yaml:9:3", "feature 'c' is bucketized but crosses no int or float column"},
        BadCase{"{name: c, cross: [s, t]}", kLabelled, "bad.yaml:4:9",
                "needs exactly one of vocab_size"}));

}  // namespace
}  // namespace pscluster
