// BuildOnnxModel on parsed specs: the graph's ops, the conv kernel's layout
// change and TF's same padding, the loss's inference output, the id inputs
// and embedding lookups of categorical features (a tiny hash table built by
// hand, its graph worked out by hand), and the refusals.
// (tests/onnx_export_test.sh and onnx_export_ctr_test.sh run real exports
// with onnxruntime.)
#include "client/onnx_export.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "client/embedding_table.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/core/features.h"

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

// --- Categorical inputs.

// A csv source: the recipes name the columns' types.
constexpr char kCtrData[] =
    "{train: {format: csv, path: a.csv, columns: [{user: int}, {tag: string}, {a: float}, "
    "{b: float}, {y: int}], label: {column: y}, dense_columns: [a, b]}, eval: {format: csv, "
    "path: a.csv, columns: [{user: int}, {tag: string}, {a: float}, {b: float}, {y: int}], "
    "label: {column: y}, dense_columns: [a, b]}}";
constexpr char kIdsOnlyData[] =
    "{train: {format: csv, path: a.csv, columns: [{tag: string}, {y: int}], label: {column: y}}, "
    "eval: {format: csv, path: a.csv, columns: [{tag: string}, {y: int}], label: {column: y}}}";

// dense 2 | user: a fixed vocabulary of 4, mean | tag: hashed, "|"-separated.
JobSpec CtrSpec() {
  return Parse(R"(
  inputs:
    dense: 2
    categorical:
      - {name: user, vocab_size: 4, embedding_dim: 2, combiner: mean}
      - {name: tag, hashed: true, embedding_dim: 3, separator: "|"}
  layers: [{dense: {units: 5, activation: relu}}, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)",
               kCtrData);
}

// A key past 2^63: the int64 -9223372036854775801.
constexpr uint64_t kHighKey = (uint64_t{1} << 63) | 7;

// user's table: row i = (10 i, 10 i + 1); tag's: keys 5, 42, kHighKey
// (ascending) with rows (1, 2, 3), (7, 8, 9), (4, 5, 6).
std::vector<EmbeddingTable> CtrTables() {
  EmbeddingTable user;
  user.feature = "user";
  user.dim = 2;
  user.values = Tensor(Shape{4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  EmbeddingTable tag;
  tag.feature = "tag";
  tag.hashed = true;
  tag.dim = 3;
  tag.keys = {5, 42, kHighKey};
  tag.values = Tensor(Shape{3, 3}, {1, 2, 3, 7, 8, 9, 4, 5, 6});
  return {user, tag};
}

const onnx::NodeProto* NodeNamed(const onnx::GraphProto& g, const std::string& name) {
  for (const onnx::NodeProto& n : g.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

const onnx::AttributeProto* Attr(const onnx::NodeProto& n, const std::string& name) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

std::vector<int64_t> Dims(const onnx::TensorProto& t) { return {t.dims().begin(), t.dims().end()}; }

// The combined embedding the graph gives a hashed feature's example `ids`,
// worked out by hand from the graph's own LabelEncoder attributes and table
// initializer, following each op's ONNX definition: LabelEncoder maps a key
// to its value or default_int64; Gather reads that row; Where masks the
// padding (-1) out; ReduceSum adds the rows; mean multiplies by 1 / max(n, 1)
// over the ids that are not padding.
std::vector<float> HashedEmbeddingByHand(const onnx::GraphProto& g, const std::string& feature,
                                         const std::vector<int64_t>& ids, bool mean) {
  const onnx::NodeProto* encoder = NodeNamed(g, "embedding/" + feature + "/row");
  const onnx::TensorProto* table = Initializer(g, "embedding/" + feature);
  EXPECT_TRUE(encoder != nullptr && table != nullptr);
  if (encoder == nullptr || table == nullptr) return {};
  const onnx::AttributeProto* keys = Attr(*encoder, "keys_int64s");
  const onnx::AttributeProto* values = Attr(*encoder, "values_int64s");
  const onnx::AttributeProto* fallback = Attr(*encoder, "default_int64");
  EXPECT_TRUE(keys != nullptr && values != nullptr && fallback != nullptr);
  const int64_t dim = table->dims(1);
  std::vector<float> out(dim, 0.0f);
  int64_t count = 0;
  for (int64_t id : ids) {
    if (id == -1) continue;
    ++count;
    int64_t row = fallback->i();
    for (int k = 0; k < keys->ints_size(); ++k) {
      if (keys->ints(k) == id) row = values->ints(k);
    }
    for (int64_t d = 0; d < dim; ++d) out[d] += table->float_data(row * dim + d);
  }
  if (mean) {
    for (float& v : out) v *= 1.0f / static_cast<float>(std::max<int64_t>(count, 1));
  }
  return out;
}

TEST(OnnxExportTest, CategoricalInputsAreIdInputsConcatenatedInSpecOrder) {
  const JobSpec spec = CtrSpec();
  absl::StatusOr<onnx::ModelProto> model = BuildOnnxModel(spec, CountingParams(spec), CtrTables());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->opset_import_size(), 2);
  EXPECT_EQ(model->opset_import(1).domain(), "ai.onnx.ml");
  EXPECT_EQ(model->opset_import(1).version(), 2);
  const onnx::GraphProto& g = model->graph();
  EXPECT_THAT(
      OpTypes(g),
      ElementsAre(
          // user: padding mask, ids outside [0, 4) -> 4 (Gather refuses it)
          "Equal", "Not", "GreaterOrEqual", "Less", "And", "Where", "Where", "Gather",
          // masked sum, times 1 / max(count, 1)
          "Unsqueeze", "Where", "ReduceSum", "Cast", "ReduceSum", "Max", "Reciprocal", "Mul",
          // tag: key -> row, masked sum
          "Equal", "Not", "LabelEncoder", "Gather", "Unsqueeze", "Where", "ReduceSum",
          // [input | user | tag], the layers
          "Concat", "Gemm", "Relu", "Gemm", "Identity", "Sigmoid"));
  ASSERT_EQ(g.input_size(), 3);
  EXPECT_EQ(g.input(0).name(), "input");
  EXPECT_EQ(g.input(1).name(), "ids/user");
  EXPECT_EQ(g.input(2).name(), "ids/tag");
  const onnx::TypeProto::Tensor& ids = g.input(2).type().tensor_type();
  EXPECT_EQ(ids.elem_type(), onnx::TensorProto::INT64);
  ASSERT_EQ(ids.shape().dim_size(), 2);
  EXPECT_EQ(ids.shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(ids.shape().dim(1).dim_param(), "tag_ids");
  // The recipe travels with the input: the seed and the separator.
  EXPECT_THAT(g.input(2).doc_string(), HasSubstr(absl::StrCat(FeatureSeed("tag"))));
  EXPECT_THAT(g.input(2).doc_string(), HasSubstr("split at '|'"));
  EXPECT_THAT(g.input(1).doc_string(), HasSubstr("0 <= n < 4"));

  const onnx::NodeProto* concat = FindNode(g, "Concat");
  ASSERT_NE(concat, nullptr);
  EXPECT_THAT(std::vector<std::string>(concat->input().begin(), concat->input().end()),
              ElementsAre("input", "embedding/user/mean", "embedding/tag/sum"));
  ASSERT_NE(Attr(*concat, "axis"), nullptr);
  EXPECT_EQ(Attr(*concat, "axis")->i(), 1);
  const onnx::TensorProto* kernel = Initializer(g, "dense_0/kernel");
  ASSERT_NE(kernel, nullptr);
  EXPECT_THAT(Dims(*kernel), ElementsAre(2 + 2 + 3, 5));

  // The fixed vocabulary: the whole table, and its bound.
  const onnx::TensorProto* user = Initializer(g, "embedding/user");
  ASSERT_NE(user, nullptr);
  EXPECT_THAT(Dims(*user), ElementsAre(4, 2));
  EXPECT_EQ(user->float_data(2 * 2 + 1), 21.0f);
  const onnx::TensorProto* vocab = Initializer(g, "embedding/user/vocab_size");
  ASSERT_NE(vocab, nullptr);
  EXPECT_EQ(vocab->int64_data(0), 4);

  // The metadata a user computes the ids with.
  ASSERT_EQ(model->metadata_props_size(), 1);
  EXPECT_EQ(model->metadata_props(0).key(), "pscluster.features");
  const nlohmann::json meta = nlohmann::json::parse(model->metadata_props(0).value());
  ASSERT_EQ(meta.size(), 2u);
  EXPECT_EQ(meta[0]["input"], "ids/user");
  EXPECT_EQ(meta[0]["table"], "fixed");
  EXPECT_EQ(meta[0]["combiner"], "mean");
  EXPECT_EQ(meta[0]["column_type"], "int");
  EXPECT_EQ(meta[1]["table"], "hashed");
  EXPECT_EQ(meta[1]["rows"], 3);
  EXPECT_EQ(meta[1]["separator"], "|");
  EXPECT_EQ(meta[1]["column_type"], "string");
  EXPECT_EQ(meta[1]["feature_seed"], absl::StrCat(FeatureSeed("tag")));
  EXPECT_EQ(meta[1]["padding"], -1);
}

TEST(OnnxExportTest, HashedTableByHand) {
  const JobSpec spec = CtrSpec();
  absl::StatusOr<onnx::ModelProto> model = BuildOnnxModel(spec, CountingParams(spec), CtrTables());
  ASSERT_TRUE(model.ok()) << model.status();
  const onnx::GraphProto& g = model->graph();
  const onnx::NodeProto* encoder = FindNode(g, "LabelEncoder");
  ASSERT_NE(encoder, nullptr);
  EXPECT_EQ(encoder->domain(), "ai.onnx.ml");
  EXPECT_THAT(std::vector<int64_t>(Attr(*encoder, "keys_int64s")->ints().begin(),
                                   Attr(*encoder, "keys_int64s")->ints().end()),
              ElementsAre(5, 42, static_cast<int64_t>(kHighKey)));
  EXPECT_LT(static_cast<int64_t>(kHighKey), 0);
  EXPECT_THAT(std::vector<int64_t>(Attr(*encoder, "values_int64s")->ints().begin(),
                                   Attr(*encoder, "values_int64s")->ints().end()),
              ElementsAre(0, 1, 2));
  EXPECT_EQ(Attr(*encoder, "default_int64")->i(), 3);
  // [rows + 1, dim]: the rows in key order, then the zero row.
  const onnx::TensorProto* table = Initializer(g, "embedding/tag");
  ASSERT_NE(table, nullptr);
  EXPECT_THAT(Dims(*table), ElementsAre(4, 3));
  EXPECT_THAT(std::vector<float>(table->float_data().begin(), table->float_data().end()),
              ElementsAre(1, 2, 3, 7, 8, 9, 4, 5, 6, 0, 0, 0));

  const int64_t high = static_cast<int64_t>(kHighKey);
  // By hand: a key's row; several summed; an unseen key (999) adds zeros;
  // padding adds nothing; no id at all: zeros.
  EXPECT_THAT(HashedEmbeddingByHand(g, "tag", {high, -1, -1}, false), ElementsAre(4, 5, 6));
  EXPECT_THAT(HashedEmbeddingByHand(g, "tag", {5, high, 42}, false), ElementsAre(12, 15, 18));
  EXPECT_THAT(HashedEmbeddingByHand(g, "tag", {999, 5, -1}, false), ElementsAre(1, 2, 3));
  EXPECT_THAT(HashedEmbeddingByHand(g, "tag", {-1, -1}, false), ElementsAre(0, 0, 0));
  // mean counts the unseen key, as pscluster counts the row it creates.
  EXPECT_THAT(HashedEmbeddingByHand(g, "tag", {999, 42, -1}, true), ElementsAre(3.5, 4, 4.5));
  // The graph's mean is that product: sum * Reciprocal(Max(count, 1)).
  const onnx::NodeProto* scale = NodeNamed(g, "embedding/user/mean");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->op_type(), "Mul");
  EXPECT_THAT(std::vector<std::string>(scale->input().begin(), scale->input().end()),
              ElementsAre("embedding/user/sum", "embedding/user/scale"));
}

TEST(OnnxExportTest, DenseInputIsAbsentWithOnlyCategoricalInputs) {
  const JobSpec spec = Parse(R"(
  inputs:
    categorical: [{name: tag, hashed: true, embedding_dim: 3}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)",
                             kIdsOnlyData);
  EmbeddingTable empty;  // nothing held: every id reads the zero row
  empty.feature = "tag";
  empty.hashed = true;
  empty.dim = 3;
  empty.values = Tensor(Shape{0, 3});
  absl::StatusOr<onnx::ModelProto> model = BuildOnnxModel(spec, CountingParams(spec), {empty});
  ASSERT_TRUE(model.ok()) << model.status();
  const onnx::GraphProto& g = model->graph();
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "ids/tag");
  EXPECT_EQ(FindNode(g, "LabelEncoder"), nullptr);
  EXPECT_EQ(FindNode(g, "Concat"), nullptr);
  const onnx::TensorProto* table = Initializer(g, "embedding/tag");
  ASSERT_NE(table, nullptr);
  EXPECT_THAT(Dims(*table), ElementsAre(1, 3));
  const onnx::NodeProto* gemm = FindNode(g, "Gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->input(0), "embedding/tag/sum");
}

TEST(OnnxExportTest, RefusesAHashKeyThatIsThePadding) {
  const JobSpec spec = CtrSpec();
  std::vector<EmbeddingTable> tables = CtrTables();
  tables[1].keys.back() = ~uint64_t{0};
  const absl::Status s = BuildOnnxModel(spec, CountingParams(spec), tables).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("hash table embedding/tag holds the key 18446744073709551615"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("the padding"));
}

TEST(OnnxExportTest, RejectsTablesThatDoNotMatchTheirFeatures) {
  const JobSpec spec = CtrSpec();
  std::vector<EmbeddingTable> tables = CtrTables();
  EXPECT_EQ(BuildOnnxModel(spec, CountingParams(spec), {tables[0]}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<EmbeddingTable> wide = CtrTables();
  wide[0].dim = 3;
  const absl::Status s = BuildOnnxModel(spec, CountingParams(spec), wide).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("feature 'user'"));
  std::vector<EmbeddingTable> short_vocab = CtrTables();
  short_vocab[0].values = Tensor(Shape{3, 2});
  EXPECT_EQ(BuildOnnxModel(spec, CountingParams(spec), short_vocab).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<EmbeddingTable> unsorted = CtrTables();
  std::swap(unsorted[1].keys[0], unsorted[1].keys[1]);
  EXPECT_EQ(BuildOnnxModel(spec, CountingParams(spec), unsorted).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(OnnxExportTest, RefusesOnlyWhatCannotBeExported) {
  // Embeddings of both kinds are exportable.
  EXPECT_TRUE(CheckOnnxExportable(CtrSpec()).ok());
  // A vocabulary of 2^30 x 2 floats: 8 GiB, past what one protobuf file
  // holds.
  const JobSpec huge = Parse(R"(
  inputs:
    categorical: [{name: item, vocab_size: 1073741824, embedding_dim: 2}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)",
                             "{train: {format: synthetic_ctr, num_examples: 10}, "
                             "eval: {format: synthetic_ctr, num_examples: 10}}");
  absl::Status s = CheckOnnxExportable(huge);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("external data"));
  JobSpec poisson = CtrSpec();
  poisson.model.loss = "poisson";
  s = CheckOnnxExportable(poisson);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("loss 'poisson' has no ONNX export"));
  EXPECT_EQ(BuildOnnxModel(poisson, CountingParams(poisson), CtrTables()).status().code(),
            absl::StatusCode::kUnimplemented);
  // A DCN-v2 cross layer is named in the refusal.
  const JobSpec dcn = Parse(R"(
  inputs: {dense: 3}
  layers: [cross, {dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)");
  s = CheckOnnxExportable(dcn);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.layers[0] is a cross layer"));
  EXPECT_EQ(BuildOnnxModel(dcn, CountingParams(dcn), {}).status().code(),
            absl::StatusCode::kUnimplemented);
  // So are DeepFM's fm term and the wide part.
  JobSpec deep_fm = CtrSpec();
  deep_fm.model.fm = true;
  s = CheckOnnxExportable(deep_fm);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.fm"));
  JobSpec wide = CtrSpec();
  wide.model.wide_dense = true;
  s = CheckOnnxExportable(wide);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.wide"));
  const JobSpec dlrm = Parse(R"(
  inputs:
    dense: 3
    categorical: [{name: user, vocab_size: 5, embedding_dim: 2}]
  bottom: [{dense: {units: 2}}]
  layers: [{dense: {units: 1}}]
  loss: sigmoid_cross_entropy
)",
                             "{train: {format: synthetic_ctr, num_examples: 10}, "
                             "eval: {format: synthetic_ctr, num_examples: 10}}");
  s = CheckOnnxExportable(dlrm);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.bottom (DLRM"));
}

TEST(OnnxExportTest, RefusesCrossesBoundariesAndTransformsByName) {
  JobSpec crossed = CtrSpec();
  crossed.model.categorical[1].cross = {"user", "tag"};
  absl::Status s = CheckOnnxExportable(crossed);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("feature 'tag' is a feature cross"));
  EXPECT_EQ(BuildOnnxModel(crossed, CountingParams(crossed), CtrTables()).status().code(),
            absl::StatusCode::kUnimplemented);
  JobSpec bucketized = CtrSpec();
  bucketized.model.categorical[0].boundaries = {0, 1, 2};
  s = CheckOnnxExportable(bucketized);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("feature 'user' is bucketized by boundaries"));
  JobSpec transformed = CtrSpec();
  transformed.data.train.dense_columns = {"a", "b"};
  transformed.data.train.dense_transforms = {DataSourceSpec::DenseTransform::kNone,
                                             DataSourceSpec::DenseTransform::kLog1p};
  s = CheckOnnxExportable(transformed);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dense column 'b' has a transform (log1p)"));
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
