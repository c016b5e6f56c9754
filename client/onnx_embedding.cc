#include "client/onnx_embedding.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "worker/core/features.h"

namespace pscluster {
namespace {

// The padding of the id inputs.
constexpr int64_t kPadding = -1;

// The type of the column `name` reads, "" when the source declares none
// (synthetic data, a spec built in code).
std::string ColumnType(const std::vector<ColumnSpec>& columns, const std::string& name) {
  for (const ColumnSpec& c : columns) {
    if (c.name != name) continue;
    switch (c.type) {
      case ColumnSpec::Type::kInt:
        return "int";
      case ColumnSpec::Type::kFloat:
        return "float";
      case ColumnSpec::Type::kString:
        return "string";
    }
  }
  return "";
}

const std::string& ColumnOf(const CategoricalFeatureSpec& f) {
  return f.column.empty() ? f.name : f.column;
}

// The combined embedding [batch, dim] of `rows` ([batch, n, dim]) over the
// ids where `valid` ([batch, n], bool) holds, as Model::Forward: a sum, or
// the sum times 1 / max(count, 1) for `mean`.
std::string Combine(OnnxGraphBuilder* b, const std::string& p, const std::string& rows,
                    const std::string& valid, Combiner combiner) {
  b->Node("Unsqueeze", {valid, b->Int64s(p + "/axis_2", {2})}, p + "/valid_3d");
  b->Node("Where", {p + "/valid_3d", rows, b->Scalar(p + "/zero_f", 0.0f)}, p + "/masked");
  const std::string ids_axis = b->Int64s(p + "/axis_1", {1});
  IntAttr(b->Node("ReduceSum", {p + "/masked", ids_axis}, p + "/sum"), "keepdims", 0);
  if (combiner == Combiner::kSum) return p + "/sum";
  // pscluster scales the sum by 1.0f / count (Model::Forward): the same
  // float reciprocal, then a product.
  IntAttr(b->Node("Cast", {valid}, p + "/valid_f"), "to", onnx::TensorProto::FLOAT);
  IntAttr(b->Node("ReduceSum", {p + "/valid_f", ids_axis}, p + "/count"), "keepdims", 1);
  b->Node("Max", {p + "/count", b->Scalar(p + "/one_f", 1.0f)}, p + "/denominator");
  b->Node("Reciprocal", {p + "/denominator"}, p + "/scale");
  b->Node("Mul", {p + "/sum", p + "/scale"}, p + "/mean");
  return p + "/mean";
}

}  // namespace

std::string IdInputName(const CategoricalFeatureSpec& feature) { return "ids/" + feature.name; }

std::string IdRecipe(const CategoricalFeatureSpec& f, const std::vector<ColumnSpec>& columns) {
  const std::string seed = absl::StrCat(FeatureSeed(f.name));
  const std::string type = ColumnType(columns, ColumnOf(f));
  std::string s = absl::StrCat(
      "int64 [batch, n]: the ids of feature '", f.name, "' (column '", ColumnOf(f), "'",
      type.empty() ? "" : absl::StrCat(", ", type),
      ") per example, padded with -1 (no id: all -1). ",
      "As worker/core's CategoricalEncoder computes them from a raw value v, with seed = ", seed,
      " (XXH3_64bits of the feature name): ");
  if (!f.separator.empty()) {
    absl::StrAppend(&s, "a string is split at '", f.separator,
                    "', each part trimmed of ASCII whitespace, empty parts skipped, one id per "
                    "part; ");
  }
  absl::StrAppend(&s, "a string part t -> XXH3_64bits_withSeed(t's bytes, seed)",
                  f.vocab_size > 0 ? absl::StrCat(" mod ", f.vocab_size) : "", "; ");
  if (f.bucket_width > 0) {
    absl::StrAppend(&s, "a number x -> n = floor(x / ", f.bucket_width, "), then as an integer; ");
  } else {
    absl::StrAppend(&s, "a float must be a whole number n, then as an integer; ");
  }
  if (f.vocab_size > 0) {
    absl::StrAppend(
        &s, "an integer n -> n if 0 <= n < ", f.vocab_size, ", else ",
        f.oov == OutOfVocabulary::kHash
            ? absl::StrCat("XXH3_64bits_withSeed(n as 8 little-endian bytes, seed) mod ",
                           f.vocab_size)
            : "an error (oov: error; the graph fails on such an id too)",
        ". A missing value gives no id. Fixed vocabulary of ", f.vocab_size, " rows.");
  } else {
    absl::StrAppend(&s,
                    "an integer n -> n if n >= 0, else XXH3_64bits_withSeed(n as 8 little-endian "
                    "bytes, seed). A missing value gives no id. Hashed: the uint64 key is fed as "
                    "the int64 of the same bits; a key the table did not hold at the checkpoint "
                    "gives a zero row (pscluster would create it from the initializer).");
  }
  return s;
}

absl::StatusOr<std::string> AddCategoricalInput(OnnxGraphBuilder* b, onnx::GraphProto* graph,
                                                const CategoricalFeatureSpec& f,
                                                const std::vector<ColumnSpec>& columns,
                                                const EmbeddingTable& table) {
  const std::string where = absl::StrCat("embedding table of feature '", f.name, "'");
  const int64_t dim = f.embedding_dim;
  if (table.feature != f.name || table.hashed != f.hashed || table.dim != dim) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the table given is '", table.feature,
                                                   "' (", table.hashed ? "hashed" : "fixed",
                                                   ", width ", table.dim, ")"));
  }
  const int64_t rows = f.hashed ? static_cast<int64_t>(table.keys.size()) : f.vocab_size;
  if (table.values.shape() != Shape{rows, dim}) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", table.values.num_elements(),
                                                   " values, not ", rows, " rows of ", dim));
  }
  const std::string ids = IdInputName(f);
  DescribeValue(graph->add_input(), ids, 0, onnx::TensorProto::INT64, f.name + "_ids");
  graph->mutable_input(graph->input_size() - 1)->set_doc_string(IdRecipe(f, columns));

  const std::string p = "embedding/" + f.name;
  b->Node("Equal", {ids, b->Int64Scalar(p + "/padding", kPadding)}, p + "/is_padding");
  b->Node("Not", {p + "/is_padding"}, p + "/valid");
  if (!f.hashed) {
    const std::string zero = b->Int64Scalar(p + "/zero", 0);
    // An id outside [0, V) becomes V, which Gather refuses (its bounds
    // check), so the run fails as pscluster refuses it; padding reads row 0
    // and is masked out.
    const std::string vocab = b->Int64Scalar(p + "/vocab_size", f.vocab_size);
    b->Node("GreaterOrEqual", {ids, zero}, p + "/non_negative");
    b->Node("Less", {ids, vocab}, p + "/below_vocab");
    b->Node("And", {p + "/non_negative", p + "/below_vocab"}, p + "/in_vocab");
    b->Node("Where", {p + "/in_vocab", ids, vocab}, p + "/checked");
    b->Node("Where", {p + "/valid", p + "/checked", zero}, p + "/row");
    b->Floats(p, {rows, dim}, table.values.data(), rows * dim);
  } else {
    // Key -> row; the default, and padding, is the extra zero row `rows`.
    for (int64_t i = 0; i < rows; ++i) {
      if (i > 0 && table.keys[i] <= table.keys[i - 1]) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": keys are not ascending and distinct at ", i));
      }
    }
    if (rows > 0 && table.keys.back() == std::numeric_limits<uint64_t>::max()) {
      return absl::UnimplementedError(absl::StrCat(
          "hash table embedding/", f.name,
          " holds the key 18446744073709551615, which as int64 "
          "is -1, the padding of the graph's id inputs: this table cannot be exported"));
    }
    if (rows == 0) {
      // Nothing held (LabelEncoder needs keys): every id reads the zero row.
      b->Node("Mul", {ids, b->Int64Scalar(p + "/zero", 0)}, p + "/row");
    } else {
      onnx::NodeProto* encoder = b->Node("LabelEncoder", {ids}, p + "/row", kOnnxMlDomain);
      onnx::AttributeProto* keys = encoder->add_attribute();
      keys->set_name("keys_int64s");
      keys->set_type(onnx::AttributeProto::INTS);
      onnx::AttributeProto* values = encoder->add_attribute();
      values->set_name("values_int64s");
      values->set_type(onnx::AttributeProto::INTS);
      keys->mutable_ints()->Reserve(static_cast<int>(rows));
      values->mutable_ints()->Reserve(static_cast<int>(rows));
      for (int64_t i = 0; i < rows; ++i) {
        keys->add_ints(static_cast<int64_t>(table.keys[i]));
        values->add_ints(i);
      }
      IntAttr(encoder, "default_int64", rows);
    }
    onnx::TensorProto* t = graph->add_initializer();
    t->set_name(p);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(rows + 1);
    t->add_dims(dim);
    t->mutable_float_data()->Reserve(static_cast<int>((rows + 1) * dim));
    t->mutable_float_data()->Add(table.values.data(), table.values.data() + rows * dim);
    for (int64_t d = 0; d < dim; ++d) t->add_float_data(0.0f);
  }
  b->Node("Gather", {p, p + "/row"}, p + "/rows");
  return Combine(b, p, p + "/rows", p + "/valid", f.combiner);
}

std::string CategoricalInputsJson(const std::vector<CategoricalFeatureSpec>& features,
                                  const std::vector<ColumnSpec>& columns,
                                  const std::vector<EmbeddingTable>& tables) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < features.size(); ++i) {
    const CategoricalFeatureSpec& f = features[i];
    out.push_back({
        {"input", IdInputName(f)},
        {"feature", f.name},
        {"column", ColumnOf(f)},
        {"column_type", ColumnType(columns, ColumnOf(f))},
        {"table", f.hashed ? "hashed" : "fixed"},
        {"vocab_size", f.vocab_size},
        {"rows", f.hashed ? static_cast<int64_t>(tables[i].keys.size()) : f.vocab_size},
        {"embedding_dim", f.embedding_dim},
        {"combiner", f.combiner == Combiner::kMean ? "mean" : "sum"},
        {"separator", f.separator},
        {"bucket_width", f.bucket_width},
        {"oov", f.oov == OutOfVocabulary::kHash ? "hash" : "error"},
        {"feature_seed", absl::StrCat(FeatureSeed(f.name))},
        {"padding", kPadding},
    });
  }
  return out.dump();
}

}  // namespace pscluster
