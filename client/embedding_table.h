// EmbeddingTable: one categorical feature's embedding table read whole out
// of a checkpoint (client/checkpoint_params.h, RestoredCheckpoint::
// ReadTables), as `psctl export` writes it into a model file
// (client/onnx_embedding.h).
#ifndef PSCLUSTER_CLIENT_EMBEDDING_TABLE_H_
#define PSCLUSTER_CLIENT_EMBEDDING_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace pscluster {

struct EmbeddingTable {
  std::string feature;  // its model.inputs.categorical name
  bool hashed = false;
  int64_t dim = 0;
  // Fixed vocabulary: empty, and `values` is [vocab_size, dim], row i for
  // id i. Hashed: every key the table holds, ascending (as uint64), and
  // `values` is [keys.size(), dim], row i for keys[i].
  std::vector<uint64_t> keys;
  Tensor values;
};

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_EMBEDDING_TABLE_H_
