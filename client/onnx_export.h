// `psctl export CHECKPOINT_DIR --format onnx -o FILE`: a trained model as an
// ONNX graph that onnxruntime (or any ONNX runtime) can run, built with
// ONNX's own protobuf schema (Debian libonnx-dev), never hand-written bytes.
//
// The graph reproduces worker/core's Model forward pass in inference form,
// the way pscluster's own eval runs it:
//  - input "input": float [batch, model.inputs.dense], one example per row
//    as pscluster reads it (an image model's rows are its H x W x C pixels,
//    row-major, channels last; the graph reshapes them to NCHW);
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
// Opset 13, IR version 7.
//
// Refused (UNIMPLEMENTED, the message naming what): categorical inputs
// (embedding tables, fixed-vocabulary or hashed), which need id inputs the
// graph does not have yet.
//
// Thread-compatible.
#ifndef PSCLUSTER_CLIENT_ONNX_EXPORT_H_
#define PSCLUSTER_CLIENT_ONNX_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/job_spec.h"
#include "common/tensor.h"
#include "onnx/onnx_pb.h"

namespace pscluster {

// OK if BuildOnnxModel can export `spec`'s model; UNIMPLEMENTED naming the
// first part it cannot ("model.inputs.categorical[0] 'f0' (a hashed
// embedding table): ...").
absl::Status CheckOnnxExportable(const JobSpec& spec);

// The ONNX model of `spec` with `params`, one tensor per ModelVariables(spec)
// entry in that order (embedding entries are not read). UNIMPLEMENTED as
// CheckOnnxExportable; INVALID_ARGUMENT if a parameter's shape does not
// match its variable.
absl::StatusOr<onnx::ModelProto> BuildOnnxModel(const JobSpec& spec,
                                                const std::vector<Tensor>& params);

struct OnnxExportReport {
  std::string path;
  std::string job_id;
  int64_t checkpoint_id = 0;
  int64_t bytes = 0;
  int64_t inputs = 0;   // floats per example
  int64_t outputs = 0;  // width of "logits" and "predictions"
  int64_t nodes = 0;
};

// Exports the newest checkpoint of `checkpoint_dir` that restores
// (client/checkpoint_params.h) to `path`, written whole to a temporary file
// then renamed. UNIMPLEMENTED for a model it refuses (before restoring
// anything); NOT_FOUND / INVALID_ARGUMENT / DATA_LOSS from loading the
// checkpoint; PERMISSION_DENIED when `path` cannot be written.
absl::StatusOr<OnnxExportReport> ExportOnnx(const std::string& checkpoint_dir,
                                           const std::string& path);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_ONNX_EXPORT_H_
