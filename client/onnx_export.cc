#include "client/onnx_export.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/checkpoint_params.h"
#include "client/checkpoint_verify.h"
#include "client/onnx_embedding.h"
#include "client/onnx_graph.h"
#include "common/model_variables.h"
#include "coordinator/core/checkpoint_manager.h"

namespace pscluster {
namespace {

constexpr int64_t kOpset = 13;
constexpr int64_t kIrVersion = 7;  // the IR of opset 13 (ONNX 1.8)
// The most bytes protobuf serializes into one message (INT_MAX).
constexpr int64_t kMaxModelBytes = (int64_t{1} << 31) - 1;

// TF's padding of one spatial axis, as worker/core/model.cc: `same` pads
// (in total) so that out = ceil(in / stride), half of it (rounded down)
// before; `valid` not at all.
void Pads(int64_t in, int64_t window, int64_t stride, Padding padding, int64_t* before,
          int64_t* after) {
  *before = *after = 0;
  if (padding != Padding::kSame) return;
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + window - in, 0);
  *before = total / 2;
  *after = total - *before;
}

// `act` applied to `x`; the nodes are named after `prefix`.
std::string Activate(OnnxGraphBuilder* b, Activation act, const std::string& x,
                     const std::string& prefix) {
  switch (act) {
    case Activation::kNone: return x;
    case Activation::kRelu: b->Node("Relu", {x}, prefix + "/relu"); return prefix + "/relu";
    case Activation::kTanh: b->Node("Tanh", {x}, prefix + "/tanh"); return prefix + "/tanh";
    case Activation::kSigmoid:
      b->Node("Sigmoid", {x}, prefix + "/sigmoid");
      return prefix + "/sigmoid";
    case Activation::kGelu: {
      // 0.5 * x * (1 + erf(x / sqrt(2))): the exact form the backends use.
      const std::string p = prefix + "/gelu";
      b->Node("Div", {x, b->Scalar(p + "/sqrt2", static_cast<float>(std::sqrt(2.0)))}, p + "/z");
      b->Node("Erf", {p + "/z"}, p + "/erf");
      b->Node("Add", {p + "/erf", b->Scalar(p + "/one", 1.0f)}, p + "/cdf2");
      b->Node("Mul", {x, p + "/cdf2"}, p + "/x_cdf2");
      b->Node("Mul", {p + "/x_cdf2", b->Scalar(p + "/half", 0.5f)}, p);
      return p;
    }
  }
  return x;
}

// An NCHW value `x` of shape `shape` ([H, W, C] per example) as pscluster's
// flat rows: back to NHWC, then [batch, H * W * C].
std::string ToFlat(OnnxGraphBuilder* b, const std::string& x, const FeatureShape& shape,
                   const std::string& prefix) {
  IntsAttr(b->Node("Transpose", {x}, prefix + "/nhwc"), "perm", {0, 2, 3, 1});
  b->Node("Reshape", {prefix + "/nhwc", b->Int64s(prefix + "/flat_shape", {-1, shape.size()})},
          prefix + "/flat");
  return prefix + "/flat";
}

// UNIMPLEMENTED when `bytes` of `what` would not fit in one protobuf
// file (2 GiB): ONNX external data, which would, is not written.
absl::Status CheckModelBytes(int64_t bytes, const std::string& what) {
  if (bytes <= kMaxModelBytes) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      what, " take ", bytes, " bytes, past the ", kMaxModelBytes,
      " one protobuf file can hold; the exporter writes no ONNX external data files, which a "
      "model this large needs"));
}

// Checks params[i] against variable i and returns it.
absl::StatusOr<const Tensor*> Param(const std::vector<VariableSpecProto>& vars,
                                    const std::vector<Tensor>& params, const std::string& name) {
  for (size_t i = 0; i < vars.size(); ++i) {
    if (vars[i].name() != name) continue;
    if (i >= params.size()) break;
    const Tensor& t = params[i];
    const std::vector<int64_t> want(vars[i].shape().begin(), vars[i].shape().end());
    if (std::vector<int64_t>(t.shape().begin(), t.shape().end()) != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", name, " has ", t.num_elements(),
                       " values of another shape than its spec's"));
    }
    return &t;
  }
  return absl::InvalidArgumentError(absl::StrCat("no value for variable ", name));
}

}  // namespace

absl::Status CheckOnnxExportable(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  if (m.loss != "softmax_cross_entropy" && m.loss != "sigmoid_cross_entropy" && m.loss != "mse" &&
      m.loss != "huber") {
    return absl::UnimplementedError(absl::StrCat("loss '", m.loss, "' has no ONNX export"));
  }
  if (m.image.image && !m.categorical.empty()) {
    // ParseJobSpec refuses this; a spec built in code may not.
    return absl::UnimplementedError(
        "model.inputs.image with categorical inputs: pscluster's Model has no such input either");
  }
  if (m.fm) return absl::UnimplementedError("model.fm (the DeepFM term) has no ONNX export yet");
  if (!m.bottom.empty()) {
    return absl::UnimplementedError(
        "model.bottom (DLRM's bottom MLP and dot interaction) has no ONNX export yet");
  }
  if (m.wide_dense || !m.wide_categorical.empty()) {
    return absl::UnimplementedError("model.wide (the wide part) has no ONNX export yet");
  }
  for (size_t i = 0; i < m.layers.size(); ++i) {
    if (m.layers[i].kind == LayerSpec::Kind::kCross) {
      return absl::UnimplementedError(absl::StrCat(
          "model.layers[", i, "] is a cross layer (DCN-v2), which has no ONNX export yet"));
    }
  }
  // The exported graph takes the model's inputs after the data pipeline
  // (dense values, looked-up embeddings); its metadata describes how ids
  // are made, which has no words yet for these (features.h).
  for (const CategoricalFeatureSpec& f : m.categorical) {
    if (!f.cross.empty()) {
      return absl::UnimplementedError(absl::StrCat(
          "categorical feature '", f.name, "' is a feature cross, which has no ONNX export yet"));
    }
    if (!f.boundaries.empty()) {
      return absl::UnimplementedError(absl::StrCat("categorical feature '", f.name,
                                                   "' is bucketized by boundaries, which has no "
                                                   "ONNX export yet"));
    }
  }
  for (const DataSourceSpec* d : {&spec.data.train, &spec.data.eval}) {
    for (size_t i = 0; i < d->dense_transforms.size() && i < d->dense_columns.size(); ++i) {
      if (d->dense_transforms[i] != DataSourceSpec::DenseTransform::kNone) {
        return absl::UnimplementedError(absl::StrCat(
            "dense column '", d->dense_columns[i],
            "' has a transform (log1p), which has no ONNX export yet"));
      }
    }
  }
  // What the spec alone fixes: whole-read variables and fixed vocabularies
  // (a hash table's rows are known only once restored: BuildOnnxModel).
  int64_t floats = 0;
  for (const VariableSpecProto& v : ModelVariables(spec)) {
    if (v.kind() == HASH_TABLE) continue;
    int64_t n = 1;
    for (int64_t d : v.shape()) n *= d;
    floats += n;
  }
  return CheckModelBytes(floats * static_cast<int64_t>(sizeof(float)), "the spec's variables");
}

absl::StatusOr<onnx::ModelProto> BuildOnnxModel(const JobSpec& spec,
                                                const std::vector<Tensor>& params,
                                                const std::vector<EmbeddingTable>& tables) {
  if (absl::Status s = CheckOnnxExportable(spec); !s.ok()) return s;
  const ModelSpec& m = spec.model;
  const std::vector<VariableSpecProto> vars = ModelVariables(spec);
  if (tables.size() != m.categorical.size()) {
    return absl::InvalidArgumentError(absl::StrCat(tables.size(), " embedding tables for ",
                                                   m.categorical.size(),
                                                   " categorical features"));
  }
  // Before building anything: the parameters and every hash table's rows
  // (each also a key and a row number in its LabelEncoder, <= 20 bytes).
  int64_t bytes = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!IsRowAccessed(vars[i]) && i < params.size()) bytes += params[i].num_elements() * 4;
  }
  for (const EmbeddingTable& t : tables) {
    bytes += t.values.num_elements() * 4 + static_cast<int64_t>(t.keys.size()) * 20 + t.dim * 4;
  }
  if (absl::Status s = CheckModelBytes(bytes, "the checkpoint's parameters and tables"); !s.ok()) {
    return s;
  }

  onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name("pscluster");
  model.set_doc_string(absl::StrCat("job ", spec.name, ", loss ", m.loss));
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  for (const CategoricalFeatureSpec& f : m.categorical) {
    if (!f.hashed) continue;
    // LabelEncoder, for the hash tables.
    onnx::OperatorSetIdProto* ml = model.add_opset_import();
    ml->set_domain(kOnnxMlDomain);
    ml->set_version(kOnnxMlOpset);
    break;
  }
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name(spec.name.empty() ? "pscluster" : spec.name);
  OnnxGraphBuilder b(graph);

  // The first layer's input, as Model::Forward builds it: [dense x | the
  // combined embedding of each categorical feature, in spec order].
  std::vector<std::string> parts;
  if (m.dense_inputs > 0 || m.categorical.empty()) {
    DescribeValue(graph->add_input(), "input", m.dense_inputs);
    parts.push_back("input");
  }
  const std::vector<ColumnSpec>& columns = spec.data.train.columns;
  for (size_t i = 0; i < m.categorical.size(); ++i) {
    absl::StatusOr<std::string> embedding =
        AddCategoricalInput(&b, graph, m.categorical[i], columns, tables[i]);
    if (!embedding.ok()) return embedding.status();
    parts.push_back(*embedding);
  }
  std::string x = parts.front();
  if (parts.size() > 1) {
    IntAttr(b.Node("Concat", parts, "features"), "axis", 1);
    x = "features";
  }
  if (!m.categorical.empty()) {
    onnx::StringStringEntryProto* meta = model.add_metadata_props();
    meta->set_key("pscluster.features");
    meta->set_value(CategoricalInputsJson(m.categorical, columns, tables));
  }
  // The current value is NCHW images of `shape` when `nchw`, else flat rows.
  bool nchw = false;
  FeatureShape shape;
  shape.channels = ModelInputWidth(m);
  if (m.image.image) {
    shape = m.image;
    b.Node("Reshape",
           {x, b.Int64s("input/nhwc_shape", {-1, shape.height, shape.width, shape.channels})},
           "input/nhwc");
    IntsAttr(b.Node("Transpose", {"input/nhwc"}, "input/nchw"), "perm", {0, 3, 1, 2});
    x = "input/nchw";
    nchw = true;
  }

  int dense_index = 0, conv_index = 0, norm_index = 0;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& layer = m.layers[i];
    const std::string prefix = absl::StrCat("layers_", i);
    switch (layer.kind) {
      case LayerSpec::Kind::kDense: {
        if (nchw) {  // ParseJobSpec requires a flatten first; keep the graph right anyway
          x = ToFlat(&b, x, shape, prefix);
          nchw = false;
        }
        const std::string name = absl::StrCat("dense_", dense_index++);
        absl::StatusOr<const Tensor*> kernel = Param(vars, params, name + "/kernel");
        if (!kernel.ok()) return kernel.status();
        absl::StatusOr<const Tensor*> bias = Param(vars, params, name + "/bias");
        if (!bias.ok()) return bias.status();
        const Tensor& k = **kernel;
        b.Node("Gemm",
               {x, b.Floats(name + "/kernel", {k.shape()[0], k.shape()[1]}, k.data(),
                            k.num_elements()),
                b.Floats(name + "/bias", {layer.units}, (*bias)->data(), layer.units)},
               name);
        x = Activate(&b, layer.activation, name, name);
        break;
      }
      case LayerSpec::Kind::kConv2d: {
        const std::string name = absl::StrCat("conv2d_", conv_index++);
        absl::StatusOr<const Tensor*> kernel = Param(vars, params, name + "/kernel");
        if (!kernel.ok()) return kernel.status();
        absl::StatusOr<const Tensor*> bias = Param(vars, params, name + "/bias");
        if (!bias.ok()) return bias.status();
        // [kh, kw, in, filters] -> [filters, in, kh, kw].
        const int64_t kh = layer.window_h, kw = layer.window_w, in = layer.input.channels,
                      filters = layer.units;
        const float* src = (*kernel)->data();
        std::vector<float> w(kh * kw * in * filters);
        for (int64_t r = 0; r < kh; ++r) {
          for (int64_t c = 0; c < kw; ++c) {
            for (int64_t ci = 0; ci < in; ++ci) {
              for (int64_t f = 0; f < filters; ++f) {
                w[((f * in + ci) * kh + r) * kw + c] = src[((r * kw + c) * in + ci) * filters + f];
              }
            }
          }
        }
        int64_t top, bottom, left, right;
        Pads(layer.input.height, kh, layer.stride_h, layer.padding, &top, &bottom);
        Pads(layer.input.width, kw, layer.stride_w, layer.padding, &left, &right);
        onnx::NodeProto* conv = b.Node(
            "Conv",
            {x, b.Floats(name + "/kernel", {filters, in, kh, kw}, w.data(), w.size()),
             b.Floats(name + "/bias", {filters}, (*bias)->data(), filters)},
            name);
        IntsAttr(conv, "kernel_shape", {kh, kw});
        IntsAttr(conv, "strides", {layer.stride_h, layer.stride_w});
        IntsAttr(conv, "pads", {top, left, bottom, right});
        x = Activate(&b, layer.activation, name, name);
        break;
      }
      case LayerSpec::Kind::kMaxPool:
      case LayerSpec::Kind::kAvgPool: {
        const bool max = layer.kind == LayerSpec::Kind::kMaxPool;
        int64_t top, bottom, left, right;
        Pads(layer.input.height, layer.window_h, layer.stride_h, layer.padding, &top, &bottom);
        Pads(layer.input.width, layer.window_w, layer.stride_w, layer.padding, &left, &right);
        const std::string name = prefix + (max ? "/max_pool" : "/avg_pool");
        onnx::NodeProto* pool = b.Node(max ? "MaxPool" : "AveragePool", {x}, name);
        IntsAttr(pool, "kernel_shape", {layer.window_h, layer.window_w});
        IntsAttr(pool, "strides", {layer.stride_h, layer.stride_w});
        IntsAttr(pool, "pads", {top, left, bottom, right});
        // pscluster averages over the window's cells inside the image.
        if (!max) IntAttr(pool, "count_include_pad", 0);
        x = name;
        break;
      }
      case LayerSpec::Kind::kFlatten:
        if (nchw) {
          x = ToFlat(&b, x, shape, prefix);
          nchw = false;
        }
        break;
      case LayerSpec::Kind::kDropout:
        // Training only: the identity at inference, as pscluster's eval.
        b.Node("Identity", {x}, prefix + "/dropout");
        x = prefix + "/dropout";
        break;
      case LayerSpec::Kind::kBatchNorm: {
        const std::string name = absl::StrCat("batch_norm_", norm_index++);
        const int64_t c = layer.input.channels;
        std::vector<std::string> inputs = {x};
        for (const char* p : {"/gamma", "/beta", "/moving_mean", "/moving_variance"}) {
          absl::StatusOr<const Tensor*> t = Param(vars, params, name + p);
          if (!t.ok()) return t.status();
          inputs.push_back(b.Floats(name + p, {c}, (*t)->data(), c));
        }
        // Channels are axis 1 both of NCHW images and of flat [batch, C] rows.
        FloatAttr(b.Node("BatchNormalization", inputs, name), "epsilon", layer.epsilon);
        x = name;
        break;
      }
      case LayerSpec::Kind::kActivation:
        x = Activate(&b, layer.activation, x, prefix);
        break;
      case LayerSpec::Kind::kCross:  // refused by CheckOnnxExportable above
        return absl::UnimplementedError("a cross layer has no ONNX export");
      case LayerSpec::Kind::kDotInteraction:  // never in model.layers
        return absl::UnimplementedError("DLRM's dot interaction has no ONNX export");
    }
    shape = layer.output;
  }
  if (nchw) x = ToFlat(&b, x, shape, "output");
  const int64_t width = shape.size();
  b.Node("Identity", {x}, "logits");
  if (m.loss == "softmax_cross_entropy") {
    IntAttr(b.Node("Softmax", {"logits"}, "predictions"), "axis", 1);
  } else if (m.loss == "sigmoid_cross_entropy") {
    b.Node("Sigmoid", {"logits"}, "predictions");
  } else {
    b.Node("Identity", {"logits"}, "predictions");
  }
  DescribeValue(graph->add_output(), "logits", width);
  DescribeValue(graph->add_output(), "predictions", width);
  if (absl::Status s = CheckModelBytes(static_cast<int64_t>(model.ByteSizeLong()), "the model");
      !s.ok()) {
    return s;
  }
  return model;
}

absl::StatusOr<OnnxExportReport> ExportOnnx(const std::string& checkpoint_dir,
                                           const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  // Refuse from the logged spec alone, before restoring any table.
  std::vector<CheckpointManifest> committed = CheckpointManager(checkpoint_dir, 1, "").List();
  if (!committed.empty()) {
    std::string job_id;
    absl::StatusOr<JobSpec> spec =
        CheckpointJobSpec(checkpoint_dir, committed.front().job_id(), &job_id);
    if (spec.ok()) {
      if (absl::Status s = CheckOnnxExportable(*spec); !s.ok()) return s;
    }
  }
  absl::StatusOr<CheckpointParams> loaded = LoadCheckpointParams(checkpoint_dir);
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<onnx::ModelProto> model =
      BuildOnnxModel(loaded->spec, loaded->params, loaded->tables);
  if (!model.ok()) return model.status();

  OnnxExportReport report;
  report.path = path;
  report.job_id = loaded->job_id;
  report.checkpoint_id = loaded->checkpoint_id;
  report.inputs = loaded->spec.model.dense_inputs;
  for (size_t i = 0; i < loaded->tables.size(); ++i) {
    const EmbeddingTable& t = loaded->tables[i];
    report.id_inputs.push_back(IdInputName(loaded->spec.model.categorical[i]));
    report.embedding_rows += t.values.num_elements() / std::max<int64_t>(t.dim, 1);
  }
  report.outputs =
      model->graph().output(0).type().tensor_type().shape().dim(1).dim_value();
  report.nodes = model->graph().node_size();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out || !model->SerializeToOstream(&out) || !out.flush()) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  }
  report.bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace pscluster
