// BuildOnnxModel on parsed specs: the graph's ops, the conv kernel's layout
// change and TF's same padding, the loss's inference output, and the
// refusals. (tests/onnx_export_test.sh runs real exports with onnxruntime.)
#include "client/onnx_export.h"

#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/model_variables.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `data` defaults to idx files (never read).
JobSpec Parse(const std::string& model_yaml,
              const std::string& data = "{train: {images: a, labels: b}, "
                                        "eval: {images: a, labels: b}}") {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "model:\n" + model_yaml + "optimizer: {type: adam}\ndata: " + data + "\n", "job.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// One tensor per variable, its values 0, 1, 2, ... (embedding tables empty).
std::vector<Tensor> CountingParams(const JobSpec& spec) {
  std::vector<Tensor> params;
  for (const VariableSpecProto& v : ModelVariables(spec)) {
    if (IsRowAccessed(v)) {
      params.emplace_back();
      continue;
    }
    Tensor t(Shape(v.shape().begin(), v.shape().end()));
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data()[i] = static_cast<float>(i);
    params.push_back(std::move(t));
  }
  return params;
}

std::vector<std::string> OpTypes(const onnx::GraphProto& g) {
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : g.node()) ops.push_back(n.op_type());
  return ops;
}

const onnx::TensorProto* Initializer(const onnx::GraphProto& g, const std::string& name) {
  for (const onnx::TensorProto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

const onnx::NodeProto* FindNode(const onnx::GraphProto& g, const std::string& op) {
  for (const onnx::NodeProto& n : g.node()) {
    if (n.op_type() == op) return &n;
  }
  return nullptr;
}

std::vector<int64_t> Ints(const onnx::NodeProto& n, const std::string& name) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.name() == name) return {a.ints().begin(), a.ints().end()};
  }
  return {};
}

TEST(OnnxExportTest, MlpIsGemmsWithActivationsAndASoftmax) {
  const JobSpec spec = Parse(R"(
  inputs: {dense: 5}
  layers: [{dense: {units: 4, activation: relu}}, gelu, {dense: {units: 3}}]
)");
  absl::StatusOr<onnx::ModelProto> model = BuildOnnxModel(spec, CountingParams(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->opset_import(0).version(), 13);
  const onnx::GraphProto& g = model->graph();
  EXPECT_THAT(OpTypes(g), ElementsAre("Gemm", "Relu", "Div", "Erf", "Add", "Mul", "Mul", "Gemm",
                                      "Identity", "Softmax"));
  ASSERT_EQ(g.output_size(), 2);
  EXPECT_EQ(g.output(0).name(), "logits");
  EXPECT_EQ(g.output(1).name(), "predictions");
  const onnx::TensorProto* kernel = Initializer(g, "dense_0/kernel");
  ASSERT_NE(kernel, nullptr);
  EXPECT_THAT(std::vector<int64_t>(kernel->dims().begin(), kernel->dims().end()),
              ElementsAre(5, 4));
}

TEST(OnnxExportTest, SigmoidLossPredictsASigmoid) {
  const JobSpec spec = Parse(R"(
  inputs: {dense: 2}
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)");
  absl::StatusOr<onnx::ModelProto> model = BuildOnnxModel(spec, CountingParams(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT(OpTypes(model->graph()), ElementsAre("Gemm", "Identity", "Sigmoid"));
}

TEST(OnnxExportTest, ConvKernelIsTransposedAndSamePaddingIsExplicit) {
  const JobSpec spec = Parse(R"(
  inputs: {image: [6, 6, 2]}
  layers:
    - conv2d: {filters: 3, kernel: [2, 3], stride: 2, padding: same}
    - batch_norm: {epsilon: 0.01}
    - avg_pool: {pool: 2, padding: same}
    - flatten
    - dropout: {rate: 0.5}
    - dense: {units: 2}
)");
  absl::StatusOr<onnx::ModelProto> model = BuildOnnxModel(spec, CountingParams(spec));
  ASSERT_TRUE(model.ok()) << model.status();
  const onnx::GraphProto& g = model->graph();
  EXPECT_THAT(OpTypes(g), ElementsAre("Reshape", "Transpose", "Conv", "BatchNormalization",
                                      "AveragePool", "Transpose", "Reshape", "Identity", "Gemm",
                                      "Identity", "Softmax"));
  // Keras [kh=2, kw=3, in=2, filters=3] -> ONNX [3, 2, 2, 3]: element
  // (f, ci, r, c) is the Keras element ((r * 3 + c) * 2 + ci) * 3 + f.
  const onnx::TensorProto* w = Initializer(g, "conv2d_0/kernel");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(std::vector<int64_t>(w->dims().begin(), w->dims().end()), ElementsAre(3, 2, 2, 3));
  const int64_t f = 2, ci = 1, r = 1, c = 2;
  EXPECT_EQ(w->float_data(((f * 2 + ci) * 2 + r) * 3 + c), ((r * 3 + c) * 2 + ci) * 3 + f);
  // 6 -> ceil(6 / 2) = 3 outputs: (3 - 1) * 2 + window - 6 padding in all.
  const onnx::NodeProto* conv = FindNode(g, "Conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_THAT(Ints(*conv, "pads"), ElementsAre(0, 0, 0, 1));  // top, left, bottom, right
  EXPECT_THAT(Ints(*conv, "strides"), ElementsAre(2, 2));
  const onnx::NodeProto* pool = FindNode(g, "AveragePool");
  ASSERT_NE(pool, nullptr);
  EXPECT_THAT(Ints(*pool, "pads"), ElementsAre(0, 0, 1, 1));  // 3 -> 2 outputs
}

TEST(OnnxExportTest, RefusesEmbeddingsNamingTheFeature) {
  const JobSpec spec = Parse(R"(
  inputs:
    dense: 2
    categorical: [{name: user, hashed: true, embedding_dim: 4}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)",
                             "{train: {format: synthetic_ctr, num_examples: 10}, "
                             "eval: {format: synthetic_ctr, num_examples: 10}}");
  const absl::Status s = CheckOnnxExportable(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'user' (a hashed embedding table)"));
  EXPECT_EQ(BuildOnnxModel(spec, CountingParams(spec)).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(OnnxExportTest, RejectsParametersOfTheWrongShape) {
  const JobSpec spec = Parse(R"(
  inputs: {dense: 3}
  layers: [{dense: {units: 2}}]
)");
  std::vector<Tensor> params = CountingParams(spec);
  params[0] = Tensor(Shape{2, 3});
  const absl::Status s = BuildOnnxModel(spec, params).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dense_0/kernel"));
}

}  // namespace
}  // namespace pscluster
