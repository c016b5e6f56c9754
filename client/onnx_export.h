// `psctl export CHECKPOINT_DIR --format onnx -o FILE`: a trained model as an
// ONNX graph that onnxruntime (or any ONNX runtime) can run, built with
// ONNX's own protobuf schema (Debian libonnx-dev), never hand-written bytes.
// docs/onnx_export.md is the user's guide to the graph's inputs.
//
// The graph reproduces worker/core's Model forward pass in inference form,
// the way pscluster's own eval runs it:
//  - input "input": float [batch, model.inputs.dense], one example per row
//    as pscluster reads it (an image model's rows are its H x W x C pixels,
//    row-major, channels last; the graph reshapes them to NCHW). Absent
//    when the model has categorical inputs and no dense ones;
//  - one input "ids/<feature>" per categorical feature: int64 [batch, n],
//    the ids worker/core's CategoricalEncoder computes from the raw value,
//    padded with -1; a fixed vocabulary's Gathered from its whole
//    [vocab_size, dim] table, a hash table's keys mapped to rows by an
//    ai.onnx.ml LabelEncoder (a key not held at the checkpoint reads a zero
//    row), combined by sum or mean over the ids that are not padding
//    (client/onnx_embedding.h); then Concat([input | each feature's
//    embedding, in spec order]), as Model::Forward builds the first
//    layer's input. The model's metadata "pscluster.features" (JSON) and
//    each id input's doc_string say how to compute the ids;
//  - dense -> Gemm; conv2d -> Conv (kernel transposed from Keras'
//    [kh, kw, in, filters] to ONNX's [filters, in, kh, kw], TF's `same`
//    padding as explicit pads); max_pool -> MaxPool; avg_pool ->
//    AveragePool excluding the padding; flatten -> Transpose to NHWC +
//    Reshape (pscluster flattens channels last); batch_norm ->
//    BatchNormalization with the moving statistics; dropout -> Identity;
//    relu/tanh/sigmoid -> Relu/Tanh/Sigmoid, gelu -> its exact erf form;
//  - outputs "logits" [batch, units of the last layer] (what the loss
//    reads) and "predictions": Softmax over them for softmax_cross_entropy,
//    Sigmoid for sigmoid_cross_entropy, the logits themselves for mse/huber.
// Opset 13 (and ai.onnx.ml 2 with a hash table), IR version 7. Every table
// is stored inside the one file: no ONNX external data is written.
//
// Refused (UNIMPLEMENTED, the message naming what): a loss with no export;
// a model whose file would pass protobuf's 2 GiB (it would need external
// data files); a hash table holding the key 2^64 - 1 (-1 as int64, the id
// inputs' padding).
//
// Thread-compatible.
#ifndef PSCLUSTER_CLIENT_ONNX_EXPORT_H_
#define PSCLUSTER_CLIENT_ONNX_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/embedding_table.h"
#include "common/job_spec.h"
#include "common/tensor.h"
#include "onnx/onnx_pb.h"

namespace pscluster {

// OK if BuildOnnxModel can export `spec`'s model as far as the spec alone
// tells; UNIMPLEMENTED naming the first part it cannot ("loss 'x' has no
// ONNX export", or the spec's variables past 2 GiB).
absl::Status CheckOnnxExportable(const JobSpec& spec);

// The ONNX model of `spec` with `params`, one tensor per ModelVariables(spec)
// entry in that order (embedding entries are not read), and `tables`, one
// per categorical feature in spec order (RestoredCheckpoint::ReadTables).
// UNIMPLEMENTED as CheckOnnxExportable, or for a model past 2 GiB or a hash
// key 2^64 - 1; INVALID_ARGUMENT if a parameter's shape does not match its
// variable, or a table its feature.
absl::StatusOr<onnx::ModelProto> BuildOnnxModel(const JobSpec& spec,
                                                const std::vector<Tensor>& params,
                                                const std::vector<EmbeddingTable>& tables = {});

struct OnnxExportReport {
  std::string path;
  std::string job_id;
  int64_t checkpoint_id = 0;
  int64_t bytes = 0;
  int64_t inputs = 0;                  // floats per example in "input"
  std::vector<std::string> id_inputs;  // "ids/<feature>", in spec order
  int64_t embedding_rows = 0;          // rows of every table, as exported
  int64_t outputs = 0;                 // width of "logits" and "predictions"
  int64_t nodes = 0;
  double seconds = 0;  // restore, build and write
};

// Exports the newest checkpoint of `checkpoint_dir` that restores
// (client/checkpoint_params.h) to `path`, written whole to a temporary file
// then renamed. UNIMPLEMENTED for a model it refuses (from the spec before
// restoring anything, or once the tables are read; no file is written);
// NOT_FOUND / INVALID_ARGUMENT / DATA_LOSS from loading the checkpoint;
// PERMISSION_DENIED when `path` cannot be written.
absl::StatusOr<OnnxExportReport> ExportOnnx(const std::string& checkpoint_dir,
                                            const std::string& path);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_ONNX_EXPORT_H_
