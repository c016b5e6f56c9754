// The categorical inputs of an exported ONNX graph: one id input per
// model.inputs.categorical feature, turned into that feature's combined
// embedding exactly as worker/core's Model combines the looked-up rows.
//
// Input "ids/<feature>": int64 [batch, n] (n symbolic, "<feature>_ids"),
// row e holding example e's ids in any order, padded with -1 (an example
// with none: all -1, which gives a zero embedding, as pscluster). The ids
// are those worker/core's CategoricalEncoder (features.h) computes from the
// raw value — the user computes them (docs/onnx_export.md; the input's
// doc_string and the model's "pscluster.features" metadata give the recipe
// and the feature's hash seed):
//  - fixed vocabulary (vocab_size V): row numbers in [0, V). The graph
//    Gathers them from the whole [V, dim] table; any other id but -1 makes
//    the run fail (Gather's bounds check), as pscluster refuses an id
//    outside the vocabulary (oov: hash maps it into [0, V) before it is an
//    id, and so must the user);
//  - hashed: the hash-table keys (uint64, fed as the int64 of the same
//    bits). An ai.onnx.ml LabelEncoder maps every key the table held at the
//    checkpoint to its row of a [rows + 1, dim] table whose last row is
//    zeros; a key it did not hold maps to that zero row. pscluster would
//    instead create the key's row from the table's initializer on first
//    lookup (random_uniform(-0.05, 0.05) by default, a pure function of the
//    job seed, the table and the key). Keys that eval looked up before the
//    checkpoint are held, with those initial values, so eval ids agree; a
//    key first seen after the checkpoint does not.
// Combiner: the rows of the non-padding ids are summed (the padding masked
// out with Where); `mean` divides by their count (at least 1), unseen keys
// included, as pscluster counts their created rows.
//
// Thread-compatible.
#ifndef PSCLUSTER_CLIENT_ONNX_EMBEDDING_H_
#define PSCLUSTER_CLIENT_ONNX_EMBEDDING_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/embedding_table.h"
#include "client/onnx_graph.h"
#include "common/job_spec.h"
#include "onnx/onnx_pb.h"

namespace pscluster {

// "ids/<feature name>".
std::string IdInputName(const CategoricalFeatureSpec& feature);

// Adds the graph input IdInputName(feature) (described in `graph`, with its
// recipe as doc_string) and the nodes that turn it into the feature's
// combined embedding, float [batch, embedding_dim]; returns that value's
// name. `columns` are the data source's (for the recipe; may be empty).
// INVALID_ARGUMENT when `table` does not match the feature (name, kind,
// width, rows); UNIMPLEMENTED, naming the table, when a hash table holds the
// key 2^64 - 1, which as int64 is the padding -1.
absl::StatusOr<std::string> AddCategoricalInput(OnnxGraphBuilder* b, onnx::GraphProto* graph,
                                                const CategoricalFeatureSpec& feature,
                                                const std::vector<ColumnSpec>& columns,
                                                const EmbeddingTable& table);

// How a raw value of `feature` becomes its ids, in words (the id input's
// doc_string).
std::string IdRecipe(const CategoricalFeatureSpec& feature, const std::vector<ColumnSpec>& columns);

// The model's "pscluster.features" metadata: a JSON array, one object per
// feature in input order: input, feature, column, column_type
// (int|float|string|""), table (fixed|hashed), vocab_size, rows (held in
// the graph), embedding_dim, combiner, separator, bucket_width, oov
// (error|hash), feature_seed (XXH3_64bits of the name, decimal string),
// padding (-1). REQUIRES: tables.size() == features.size().
std::string CategoricalInputsJson(const std::vector<CategoricalFeatureSpec>& features,
                                  const std::vector<ColumnSpec>& columns,
                                  const std::vector<EmbeddingTable>& tables);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_ONNX_EMBEDDING_H_
