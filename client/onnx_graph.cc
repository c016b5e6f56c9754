#include "client/onnx_graph.h"

namespace pscluster {

std::string OnnxGraphBuilder::Floats(const std::string& name, const std::vector<int64_t>& dims,
                                     const float* data, int64_t n) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->mutable_float_data()->Add(data, data + n);
  return name;
}

std::string OnnxGraphBuilder::Int64s(const std::string& name, const std::vector<int64_t>& values) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return name;
}

std::string OnnxGraphBuilder::Int64Scalar(const std::string& name, int64_t v) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(v);
  return name;
}

onnx::NodeProto* OnnxGraphBuilder::Node(const std::string& op,
                                        const std::vector<std::string>& inputs,
                                        const std::string& output, const std::string& domain) {
  onnx::NodeProto* node = graph_->add_node();
  node->set_op_type(op);
  node->set_name(output);
  if (!domain.empty()) node->set_domain(domain);
  for (const std::string& in : inputs) node->add_input(in);
  node->add_output(output);
  return node;
}

void IntsAttr(onnx::NodeProto* node, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void IntAttr(onnx::NodeProto* node, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void FloatAttr(onnx::NodeProto* node, const std::string& name, float v) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void DescribeValue(onnx::ValueInfoProto* v, const std::string& name, int64_t width, int32_t type,
                   const std::string& width_param) {
  v->set_name(name);
  onnx::TypeProto::Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  t->mutable_shape()->add_dim()->set_dim_param("batch");
  if (width_param.empty()) {
    t->mutable_shape()->add_dim()->set_dim_value(width);
  } else {
    t->mutable_shape()->add_dim()->set_dim_param(width_param);
  }
}

}  // namespace pscluster
