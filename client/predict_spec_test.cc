#include "client/predict_spec.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pscluster {
namespace {

std::string TmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TmpDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

constexpr char kJob[] = R"(name: j
model:
  inputs: {dense: 4}
  layers: [{dense: {units: 3}}]
optimizer: {type: sgd}
data:
  train: {images: train-images, labels: train-labels}
  eval: {images: eval-images, labels: eval-labels}
summaries: {logdir: /elsewhere}
checkpoint: {dir: ckpt, every_steps: 10}
)";

PredictSource Source() {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kJob, "j.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return PredictSource{*spec, "/abs/ckpt"};
}

TEST(PredictSpecTest, TheDataFileReplacesTrainAndEval) {
  const std::string data =
      Write("data.yaml", "{format: idx, images: rows-images, labels: rows-labels}\n");
  absl::StatusOr<JobSpec> spec = PredictSpec(Source(), data);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.eval.images, "rows-images");
  EXPECT_EQ(spec->data.eval.labels, "rows-labels");
  EXPECT_EQ(spec->data.train.images, "rows-images");
  EXPECT_EQ(spec->checkpoint.dir, "/abs/ckpt");
  EXPECT_EQ(spec->checkpoint.every_steps, 10);
  EXPECT_TRUE(spec->summaries.logdir.empty());
  EXPECT_EQ(spec->model.layers.size(), 1u);
  // The text sent is the spec returned.
  absl::StatusOr<JobSpec> again = ParseJobSpec(spec->yaml, "sent");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data.eval.images, "rows-images");
}

TEST(PredictSpecTest, WithoutDataTheJobsEvalDataIsPredicted) {
  absl::StatusOr<JobSpec> spec = PredictSpec(Source(), "");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.eval.images, "eval-images");
  EXPECT_EQ(spec->data.train.images, "eval-images");
}

TEST(PredictSpecTest, BadDataFilesAreNamed) {
  absl::StatusOr<JobSpec> missing = PredictSpec(Source(), TmpDir() + "/no-such.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such.yaml"), std::string::npos);

  const std::string list = Write("list.yaml", "[1, 2]\n");
  absl::StatusOr<JobSpec> not_map = PredictSpec(Source(), list);
  EXPECT_EQ(not_map.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(not_map.status().message().find("list.yaml"), std::string::npos);

  // Rows to predict need no labels.
  const std::string no_labels = Write("nolabels.yaml", "{format: idx, images: x}\n");
  absl::StatusOr<JobSpec> unlabelled = PredictSpec(Source(), no_labels);
  ASSERT_TRUE(unlabelled.ok()) << unlabelled.status();
  EXPECT_FALSE(unlabelled->data.eval.labelled);
  EXPECT_EQ(DataFiles(*unlabelled), (std::vector<std::string>{"x", "x"}));

  const std::string no_images = Write("noimages.yaml", "{format: idx, labels: y}\n");
  absl::StatusOr<JobSpec> refused = PredictSpec(Source(), no_images);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("images"), std::string::npos) << refused.status();

  const std::string garbage = Write("garbage.yaml", "{format: idx, images: [\n");
  EXPECT_EQ(PredictSpec(Source(), garbage).status().code(), absl::StatusCode::kInvalidArgument);

  // Rows are predicted from memory: a streaming source is refused, named.
  const std::string stream = Write(
      "stream.yaml", "{format: tfrecord, path: x.tfrecord, columns: [{a: float}, {b: float}, "
                     "{c: float}, {d: float}], dense_columns: [a, b, c, d]}\n");
  absl::StatusOr<JobSpec> streamed = PredictSpec(Source(), stream);
  EXPECT_EQ(streamed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(streamed.status().message().find("streaming source"), std::string::npos)
      << streamed.status();
}

TEST(PredictSpecTest, LoadPredictSourceNamesWhatIsMissing) {
  absl::StatusOr<PredictSource> none = LoadPredictSource(TmpDir() + "/nothing-here");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("nothing-here"), std::string::npos);

  std::string job = kJob;
  job.erase(job.find("checkpoint:"));
  const std::string no_dir = Write("nodir.yaml", job);
  absl::StatusOr<PredictSource> s = LoadPredictSource(no_dir);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("checkpoint.dir"), std::string::npos);

  // A directory without a job log.
  const std::string empty = TmpDir() + "/empty-ckpt";
  std::filesystem::create_directories(empty);
  EXPECT_EQ(LoadPredictSource(empty).status().code(), absl::StatusCode::kNotFound);
}

TEST(PredictSpecTest, SoftmaxRowsAreProbabilitiesAndTheClass) {
  const JobSpec spec = Source().spec;  // softmax_cross_entropy
  EXPECT_EQ(PredictCsvHeader(spec, 3), "row,p0,p1,p2,class\n");
  const float logits[3] = {0.0f, 2.0f, 0.0f};
  std::string line;
  AppendPredictCsvRow(spec, 7, logits, 3, &line);
  float p0, p1, p2;
  int row, cls;
  ASSERT_EQ(std::sscanf(line.c_str(), "%d,%f,%f,%f,%d", &row, &p0, &p1, &p2, &cls), 5) << line;
  EXPECT_EQ(row, 7);
  EXPECT_NEAR(p0, 0.1065070, 1e-6);
  EXPECT_NEAR(p1, 0.7869860, 1e-6);
  EXPECT_EQ(p0, p2);
  EXPECT_EQ(cls, 1);
  EXPECT_EQ(line.back(), '\n');
}

TEST(PredictSpecTest, BinaryAndRegressionRows) {
  JobSpec spec = Source().spec;
  spec.model.loss = "sigmoid_cross_entropy";
  EXPECT_EQ(PredictCsvHeader(spec, 1), "row,prediction\n");
  const float zero = 0.0f;
  std::string line;
  AppendPredictCsvRow(spec, 0, &zero, 1, &line);
  EXPECT_EQ(line, "0,0.5\n");
  spec.model.loss = "mse";
  EXPECT_EQ(PredictCsvHeader(spec, 2), "row,y0,y1\n");
  const float y[2] = {1.5f, -0.25f};
  line.clear();
  AppendPredictCsvRow(spec, 3, y, 2, &line);
  EXPECT_EQ(line, "3,1.5,-0.25\n");
}

}  // namespace
}  // namespace pscluster
