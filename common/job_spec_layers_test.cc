// ParseJobSpec on the conv-net layers, activations, losses and L2: what
// parses, the shapes it infers, and the INVALID_ARGUMENT a bad model gets.
#include <string>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<JobSpec> Parse(const std::string& model_yaml) {
  return ParseJobSpec("model:\n" + model_yaml + R"(
optimizer: {type: adam}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
)",
                      "job.yaml");
}

void ExpectError(const std::string& model_yaml, const std::string& message) {
  auto spec = Parse(model_yaml);
  ASSERT_FALSE(spec.ok()) << model_yaml;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(message));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("job.yaml:"));
}

TEST(JobSpecLayersTest, ParsesTheExampleCnn) {
  auto spec = LoadJobSpec("examples/fashion_mnist_cnn.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelSpec& m = spec->model;
  EXPECT_TRUE(m.image.image);
  EXPECT_EQ(m.dense_inputs, 784);
  ASSERT_EQ(m.layers.size(), 8u);
  EXPECT_EQ(m.layers[0].kind, LayerSpec::Kind::kConv2d);
  EXPECT_EQ(m.layers[0].output.height, 26);
  EXPECT_EQ(m.layers[0].output.channels, 32);
  EXPECT_EQ(m.layers[1].kind, LayerSpec::Kind::kMaxPool);
  EXPECT_EQ(m.layers[1].output.height, 13);
  EXPECT_EQ(m.layers[3].output.height, 5);  // 11 -> floor(11 / 2)
  EXPECT_EQ(m.layers[4].kind, LayerSpec::Kind::kFlatten);
  EXPECT_EQ(m.layers[4].output.size(), 5 * 5 * 64);
  EXPECT_FALSE(m.layers[4].output.image);
  EXPECT_EQ(m.layers[6].kind, LayerSpec::Kind::kDropout);
  EXPECT_DOUBLE_EQ(m.layers[6].rate, 0.3);
}

TEST(JobSpecLayersTest, ParsesEveryOption) {
  auto spec = Parse(R"(
  inputs: {image: [9, 8, 3], dense: 216}
  layers:
    - conv2d: {filters: 4, kernel: [3, 2], stride: 2, padding: same, activation: gelu, l2: 0.01}
    - batch_norm: {momentum: 0.9, epsilon: 0.0001}
    - avg_pool: {pool: [2, 1], stride: [1, 1], padding: valid}
    - max_pool
    - tanh
    - flatten
    - dense: {units: 5, activation: sigmoid}
    - dropout: {rate: 0}
    - dense: {units: 3}
  loss: {type: huber, delta: 2.5}
  l2: 0.001
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelSpec& m = spec->model;
  const LayerSpec& conv = m.layers[0];
  EXPECT_EQ(conv.window_h, 3);
  EXPECT_EQ(conv.window_w, 2);
  EXPECT_EQ(conv.stride_h, 2);
  EXPECT_EQ(conv.padding, Padding::kSame);
  EXPECT_EQ(conv.activation, Activation::kGelu);
  EXPECT_TRUE(conv.has_l2);
  EXPECT_FLOAT_EQ(conv.l2, 0.01f);
  EXPECT_EQ(conv.output.height, 5);  // ceil(9 / 2)
  EXPECT_EQ(conv.output.width, 4);
  EXPECT_FLOAT_EQ(m.layers[1].momentum, 0.9f);
  EXPECT_EQ(m.layers[2].output.height, 4);  // valid 2x1 window, stride 1
  EXPECT_EQ(m.layers[3].window_h, 2);       // max_pool defaults: 2x2, stride 2
  EXPECT_EQ(m.layers[3].output.height, 2);
  EXPECT_EQ(m.layers[3].output.width, 2);
  EXPECT_EQ(m.layers[4].kind, LayerSpec::Kind::kActivation);
  EXPECT_EQ(m.layers[4].activation, Activation::kTanh);
  EXPECT_EQ(m.layers[5].output.size(), 16);
  EXPECT_EQ(m.loss, "huber");
  EXPECT_FLOAT_EQ(m.huber_delta, 2.5f);
  EXPECT_FLOAT_EQ(m.l2, 0.001f);
}

TEST(JobSpecLayersTest, RejectsModelsThatDoNotFit) {
  ExpectError(R"(
  inputs: {image: [28, 28, 1]}
  layers:
    - conv2d: {filters: 4, kernel: 3}
    - dense: {units: 10}
)",
              "dense needs a flat input, but its input is an image [26, 26, 4]: add a flatten");
  ExpectError(R"(
  inputs: {dense: 784}
  layers:
    - conv2d: {filters: 4, kernel: 3}
    - flatten
    - dense: {units: 10}
)",
              "conv2d needs an image input: set model.inputs.image");
  ExpectError(R"(
  inputs: {image: [4, 4, 1]}
  layers:
    - conv2d: {filters: 4, kernel: 5}
    - flatten
    - dense: {units: 10}
)",
              "a 5x5 window with padding valid does not fit its input of 4x4");
  ExpectError(R"(
  inputs: {image: [28, 28, 1], dense: 100}
  layers: [flatten, {dense: {units: 10}}]
)",
              "model.inputs.dense is 100 but model.inputs.image holds 784 values");
  ExpectError(R"(
  inputs: {image: [28, 28]}
  layers: [flatten, {dense: {units: 10}}]
)",
              "model.inputs.image must be [height, width, channels]");
  ExpectError(R"(
  inputs:
    image: [2, 2, 1]
    categorical: [{name: u, vocab_size: 3}]
  layers: [flatten, {dense: {units: 10}}]
)",
              "cannot be combined with categorical inputs");
}

TEST(JobSpecLayersTest, RejectsBadLayerOptions) {
  const std::string head = "  inputs: {image: [8, 8, 1]}\n  layers:\n";
  const std::string tail = "    - flatten\n    - dense: {units: 10}\n";
  ExpectError(head + "    - conv2d: {filters: 4}\n" + tail, "is missing required key 'kernel'");
  ExpectError(head + "    - conv2d: {filters: 4, kernel: 0}\n" + tail,
              "model.layers[0].conv2d.kernel must be >= 1");
  ExpectError(head + "    - conv2d: {filters: 4, kernel: 65}\n" + tail, "must be <= 64");
  ExpectError(head + "    - conv2d: {filters: 4, kernel: [3, 3, 3]}\n" + tail,
              "must be N or [height, width]");
  ExpectError(head + "    - conv2d: {filters: 4, kernel: 3, padding: full}\n" + tail,
              "unknown model.layers[0].conv2d.padding 'full' (expected valid or same)");
  ExpectError(head + "    - conv2d: {filters: 4, kernel: 3, activation: swish}\n" + tail,
              "unknown activation 'swish' (expected relu, tanh, sigmoid, gelu or none)");
  ExpectError(head + "    - max_pool: {size: 2}\n" + tail, "unknown key 'size'");
  ExpectError(head + "    - dropout: {rate: 1}\n" + tail, "rate must be in [0, 1), got 1");
  ExpectError(head + "    - dropout\n" + tail, "dropout needs {rate: R}");
  ExpectError(head + "    - batch_norm: {momentum: 1.5}\n" + tail, "momentum must be in [0, 1)");
  ExpectError(head + "    - flatten: {x: 1}\n" + tail, "flatten takes no options");
  ExpectError(head + "    - gelu: {x: 1}\n" + tail, "gelu takes no options");
  ExpectError(head + "    - pool\n" + tail, "unknown layer 'pool'");
  ExpectError(head + tail + "  l2: -1\n", "model.l2 must be in [0, 1e6)");
  ExpectError(head + tail + "  loss: hinge\n",
              "unknown loss 'hinge' (expected softmax_cross_entropy, sigmoid_cross_entropy, "
              "mse or huber)");
  ExpectError(head + tail + "  loss: {type: mse, delta: 1}\n", "delta applies to huber only");
  ExpectError(head + tail + "  loss: {type: huber, delta: 0}\n", "delta must be > 0");
}

TEST(JobSpecLayersTest, BoundsConvScratch) {
  // 1024x1024 image, 64x64 kernel, same padding: the im2col patches alone
  // are far past the activation limit.
  auto spec = ParseJobSpec(R"(
model:
  inputs: {image: [1024, 1024, 4]}
  layers:
    - conv2d: {filters: 1, kernel: 64, padding: same}
    - flatten
    - dense: {units: 2}
optimizer: {type: adam}
data:
  train: {images: a, labels: b}
  eval: {images: a, labels: b}
  per_replica_batch: 1
)",
                           "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("over the limit"));
}

}  // namespace
}  // namespace pscluster
