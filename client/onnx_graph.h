// OnnxGraphBuilder: the few ways `psctl export` adds to an ONNX GraphProto
// (ONNX's own protobuf schema, Debian libonnx-dev): initializers, nodes with
// one named output, attributes, and [batch, ...] value descriptions. Shared
// by the layer graph (onnx_export.cc) and the categorical inputs
// (onnx_embedding.h).
//
// Thread-compatible; the builder does not own the graph.
#ifndef PSCLUSTER_CLIENT_ONNX_GRAPH_H_
#define PSCLUSTER_CLIENT_ONNX_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace pscluster {

// The domain of ONNX's traditional-ML operators (LabelEncoder) and the
// version of it the exported graphs import.
inline constexpr char kOnnxMlDomain[] = "ai.onnx.ml";
inline constexpr int64_t kOnnxMlOpset = 2;

class OnnxGraphBuilder {
 public:
  // REQUIRES: `graph` outlives the builder.
  explicit OnnxGraphBuilder(onnx::GraphProto* graph) : graph_(graph) {}

  // A float initializer named `name` of shape `dims` holding data[0, n);
  // returns `name`.
  std::string Floats(const std::string& name, const std::vector<int64_t>& dims, const float* data,
                     int64_t n);
  // A float scalar initializer.
  std::string Scalar(const std::string& name, float v) { return Floats(name, {}, &v, 1); }
  // A 1-D int64 initializer (shapes, axes).
  std::string Int64s(const std::string& name, const std::vector<int64_t>& values);
  // An int64 scalar initializer.
  std::string Int64Scalar(const std::string& name, int64_t v);

  // Adds an `op` node (of `domain`, "" for ONNX's own) reading `inputs`;
  // returns it so that attributes can be set. Its one output, and its
  // name, are `output`.
  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::string& output, const std::string& domain = "");

 private:
  onnx::GraphProto* graph_;
};

void IntAttr(onnx::NodeProto* node, const std::string& name, int64_t v);
void IntsAttr(onnx::NodeProto* node, const std::string& name, const std::vector<int64_t>& v);
void FloatAttr(onnx::NodeProto* node, const std::string& name, float v);

// A [batch, width] value of element type `type` (onnx::TensorProto's
// DataType); batch is the symbolic "batch", width a number, or the symbolic
// `width_param` when that is not empty.
void DescribeValue(onnx::ValueInfoProto* v, const std::string& name, int64_t width,
                   int32_t type = onnx::TensorProto::FLOAT, const std::string& width_param = "");

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_ONNX_GRAPH_H_
