#include "common/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/initializer.h"
#include "common/lr_schedule.h"

namespace pscluster {
namespace {

// Thrown inside the parser and turned into a Status at its boundary.
struct SpecError {
  YAML::Mark mark;
  std::string message;
};

[[noreturn]] void Fail(const YAML::Node& node, std::string message) {
  throw SpecError{node.Mark(), std::move(message)};
}

std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "empty";
    default: return absl::StrCat("'", n.Scalar(), "'");
  }
}

void ExpectMap(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) Fail(node, absl::StrCat(where, " must be a mapping, got ", Describe(node)));
}

// Rejects keys of `node` outside `allowed`, naming the ones that are valid.
void CheckKeys(const YAML::Node& node, const std::string& where,
               const std::vector<std::string>& allowed) {
  ExpectMap(node, where);
  std::set<std::string> ok(allowed.begin(), allowed.end());
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!ok.count(key)) {
      Fail(kv.first, absl::StrCat("unknown key '", key, "' in ", where, " (expected one of: ",
                                  absl::StrJoin(allowed, ", "), ")"));
    }
  }
}

template <typename T>
T Scalar(const YAML::Node& node, const std::string& what, const char* type_name) {
  if (!node.IsScalar()) Fail(node, absl::StrCat(what, " must be ", type_name, ", got ", Describe(node)));
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    Fail(node, absl::StrCat(what, " must be ", type_name, ", got ", Describe(node)));
  }
}

std::string Str(const YAML::Node& n, const std::string& what) {
  return Scalar<std::string>(n, what, "a string");
}
double Num(const YAML::Node& n, const std::string& what) {
  return Scalar<double>(n, what, "a number");
}
bool Bool(const YAML::Node& n, const std::string& what) {
  return Scalar<bool>(n, what, "true or false");
}
// An integer in [min_value, max_value]; the bounds (job_spec.h, JobLimits)
// keep every size of a job within what the cluster can hold and what int64
// arithmetic on it can represent.
int64_t Int(const YAML::Node& n, const std::string& what, int64_t min_value,
            int64_t max_value = std::numeric_limits<int64_t>::max()) {
  const int64_t v = Scalar<int64_t>(n, what, "an integer");
  if (v < min_value) Fail(n, absl::StrCat(what, " must be >= ", min_value, ", got ", v));
  if (v > max_value) {
    Fail(n, absl::StrCat(what, " must be <= ", max_value, " (the stated limit), got ", v));
  }
  return v;
}
float Positive(const YAML::Node& n, const std::string& what) {
  const double v = Num(n, what);
  if (!(v > 0)) Fail(n, absl::StrCat(what, " must be > 0, got ", v));
  return static_cast<float>(v);
}

YAML::Node Required(const YAML::Node& parent, const std::string& key, const std::string& where) {
  YAML::Node n = parent[key];
  if (!n) Fail(parent, absl::StrCat(where, " is missing required key '", key, "'"));
  return n;
}

InitializerProto ParseInitializer(const YAML::Node& n, const std::string& where) {
  InitializerProto init;
  if (n.IsScalar()) {
    init.set_type(Str(n, where));
  } else {
    CheckKeys(n, where, {"type", "value", "minval", "maxval", "mean", "stddev"});
    init.set_type(Str(Required(n, "type", where), where + ".type"));
    if (n["value"]) init.set_value(static_cast<float>(Num(n["value"], where + ".value")));
    if (n["minval"]) init.set_minval(static_cast<float>(Num(n["minval"], where + ".minval")));
    if (n["maxval"]) init.set_maxval(static_cast<float>(Num(n["maxval"], where + ".maxval")));
    if (n["mean"]) init.set_mean(static_cast<float>(Num(n["mean"], where + ".mean")));
    if (n["stddev"]) init.set_stddev(static_cast<float>(Num(n["stddev"], where + ".stddev")));
  }
  if (absl::Status s = ValidateInitializer(init); !s.ok()) Fail(n, std::string(s.message()));
  return init;
}

Activation ParseActivation(const YAML::Node& n) {
  const std::string a = Str(n, "activation");
  if (a == "relu") return Activation::kRelu;
  if (a == "tanh") return Activation::kTanh;
  if (a == "sigmoid") return Activation::kSigmoid;
  if (a == "gelu") return Activation::kGelu;
  if (a == "none" || a == "linear") return Activation::kNone;
  Fail(n, absl::StrCat("unknown activation '", a,
                       "' (expected relu, tanh, sigmoid, gelu or none)"));
}

// A window side pair: `3` or `[3, 3]` (height, width), each in [1, kMaxWindow].
void ParseWindow(const YAML::Node& n, const std::string& what, int64_t* h, int64_t* w) {
  if (n.IsSequence()) {
    if (n.size() != 2) Fail(n, absl::StrCat(what, " must be N or [height, width]"));
    *h = Int(n[0], what + "[0]", 1, JobLimits::kMaxWindow);
    *w = Int(n[1], what + "[1]", 1, JobLimits::kMaxWindow);
    return;
  }
  *h = *w = Int(n, what, 1, JobLimits::kMaxWindow);
}

Padding ParsePadding(const YAML::Node& n, const std::string& what) {
  const std::string p = Str(n, what);
  if (p == "valid") return Padding::kValid;
  if (p == "same") return Padding::kSame;
  Fail(n, absl::StrCat("unknown ", what, " '", p, "' (expected valid or same)"));
}

float ParseL2(const YAML::Node& n, const std::string& what) {
  const double v = Num(n, what);
  if (!(v >= 0 && v < 1e6)) Fail(n, absl::StrCat(what, " must be in [0, 1e6), got ", v));
  return static_cast<float>(v);
}

LayerSpec ParseLayer(const YAML::Node& n, int index) {
  const std::string where = absl::StrCat("model.layers[", index, "]");
  LayerSpec layer;
  std::string kind;
  YAML::Node body;
  if (n.IsScalar()) {
    kind = n.as<std::string>();
  } else if (n.IsMap() && n.size() == 1) {
    kind = n.begin()->first.as<std::string>();
    body = n.begin()->second;
  } else {
    Fail(n, absl::StrCat(where, " must be a layer name or a one-key mapping such as {dense: {units: 10}}"));
  }
  const bool empty_body = !body || body.IsNull() || (body.IsMap() && body.size() == 0);
  const std::string at = where + "." + kind;
  if (kind == "relu" || kind == "tanh" || kind == "sigmoid" || kind == "gelu") {
    layer.kind = LayerSpec::Kind::kActivation;
    if (!empty_body) Fail(body, absl::StrCat(where, ": ", kind, " takes no options"));
    layer.activation = ParseActivation(n.IsScalar() ? n : n.begin()->first);
    return layer;
  }
  if (kind == "flatten") {
    layer.kind = LayerSpec::Kind::kFlatten;
    if (!empty_body) Fail(body, absl::StrCat(where, ": flatten takes no options"));
    return layer;
  }
  if (kind == "dense") {
    if (empty_body) Fail(n, absl::StrCat(where, ": dense needs {units: N}"));
    CheckKeys(body, where + ".dense", {"units", "activation", "l2"});
    layer.kind = LayerSpec::Kind::kDense;
    layer.units = Int(Required(body, "units", where + ".dense"), where + ".dense.units", 1, JobLimits::kMaxUnits);
    if (body["activation"]) layer.activation = ParseActivation(body["activation"]);
    if (body["l2"]) {
      layer.has_l2 = true;
      layer.l2 = ParseL2(body["l2"], at + ".l2");
    }
    return layer;
  }
  if (kind == "conv2d") {
    if (empty_body) Fail(n, absl::StrCat(where, ": conv2d needs {filters: N, kernel: K}"));
    CheckKeys(body, at, {"filters", "kernel", "stride", "padding", "activation", "l2"});
    layer.kind = LayerSpec::Kind::kConv2d;
    layer.units = Int(Required(body, "filters", at), at + ".filters", 1, JobLimits::kMaxUnits);
    ParseWindow(Required(body, "kernel", at), at + ".kernel", &layer.window_h, &layer.window_w);
    if (body["stride"]) ParseWindow(body["stride"], at + ".stride", &layer.stride_h, &layer.stride_w);
    if (body["padding"]) layer.padding = ParsePadding(body["padding"], at + ".padding");
    if (body["activation"]) layer.activation = ParseActivation(body["activation"]);
    if (body["l2"]) {
      layer.has_l2 = true;
      layer.l2 = ParseL2(body["l2"], at + ".l2");
    }
    return layer;
  }
  if (kind == "max_pool" || kind == "avg_pool") {
    layer.kind = kind == "max_pool" ? LayerSpec::Kind::kMaxPool : LayerSpec::Kind::kAvgPool;
    layer.window_h = layer.window_w = 2;
    if (!empty_body) {
      CheckKeys(body, at, {"pool", "stride", "padding"});
      if (body["pool"]) ParseWindow(body["pool"], at + ".pool", &layer.window_h, &layer.window_w);
    }
    layer.stride_h = layer.window_h;
    layer.stride_w = layer.window_w;
    if (!empty_body) {
      if (body["stride"]) ParseWindow(body["stride"], at + ".stride", &layer.stride_h, &layer.stride_w);
      if (body["padding"]) layer.padding = ParsePadding(body["padding"], at + ".padding");
    }
    return layer;
  }
  if (kind == "dropout") {
    if (empty_body) Fail(n, absl::StrCat(where, ": dropout needs {rate: R}"));
    CheckKeys(body, at, {"rate"});
    layer.kind = LayerSpec::Kind::kDropout;
    const YAML::Node rate = Required(body, "rate", at);
    layer.rate = Num(rate, at + ".rate");
    if (!(layer.rate >= 0 && layer.rate < 1)) {
      Fail(rate, absl::StrCat(at, ".rate must be in [0, 1), got ", layer.rate));
    }
    return layer;
  }
  if (kind == "batch_norm") {
    layer.kind = LayerSpec::Kind::kBatchNorm;
    if (!empty_body) {
      CheckKeys(body, at, {"momentum", "epsilon"});
      if (YAML::Node m = body["momentum"]) {
        const double v = Num(m, at + ".momentum");
        if (!(v >= 0 && v < 1)) Fail(m, absl::StrCat(at, ".momentum must be in [0, 1), got ", v));
        layer.momentum = static_cast<float>(v);
      }
      if (body["epsilon"]) layer.epsilon = Positive(body["epsilon"], at + ".epsilon");
    }
    return layer;
  }
  Fail(n.IsMap() ? n.begin()->first : n,
       absl::StrCat("unknown layer '", kind, "' in ", where,
                    " (expected dense, conv2d, max_pool, avg_pool, flatten, dropout, batch_norm, "
                    "relu, tanh, sigmoid or gelu)"));
}

// One side of a conv2d or pooling output, as TF computes it.
int64_t WindowOutput(int64_t in, int64_t window, int64_t stride, Padding padding) {
  if (padding == Padding::kSame) return (in + stride - 1) / stride;
  return in < window ? 0 : (in - window) / stride + 1;
}

// Fills every layer's input and output shapes, failing at the layer that
// does not fit its input.
void InferShapes(const YAML::Node& layers, ModelSpec* m) {
  FeatureShape shape;
  if (m->image.image) {
    shape = m->image;
  } else {
    shape.channels = m->dense_inputs;
    for (const CategoricalFeatureSpec& f : m->categorical) shape.channels += f.embedding_dim;
  }
  for (size_t i = 0; i < m->layers.size(); ++i) {
    LayerSpec& layer = m->layers[i];
    const YAML::Node at = layers[i];
    const std::string where = absl::StrCat("model.layers[", i, "]");
    layer.input = shape;
    switch (layer.kind) {
      case LayerSpec::Kind::kDense:
        if (shape.image) {
          Fail(at, absl::StrCat(where, ": dense needs a flat input, but its input is an image [",
                                shape.height, ", ", shape.width, ", ", shape.channels,
                                "]: add a flatten layer before it"));
        }
        shape.channels = layer.units;
        break;
      case LayerSpec::Kind::kConv2d:
      case LayerSpec::Kind::kMaxPool:
      case LayerSpec::Kind::kAvgPool: {
        const bool conv = layer.kind == LayerSpec::Kind::kConv2d;
        if (!shape.image) {
          Fail(at, absl::StrCat(where, ": ", conv ? "conv2d" : "pooling",
                                " needs an image input: set model.inputs.image: [H, W, C] and "
                                "put it before any flatten or dense layer"));
        }
        FeatureShape out = shape;
        out.height = WindowOutput(shape.height, layer.window_h, layer.stride_h, layer.padding);
        out.width = WindowOutput(shape.width, layer.window_w, layer.stride_w, layer.padding);
        if (conv) out.channels = layer.units;
        if (out.height < 1 || out.width < 1) {
          Fail(at, absl::StrCat(where, ": a ", layer.window_h, "x", layer.window_w,
                                " window with padding valid does not fit its input of ",
                                shape.height, "x", shape.width));
        }
        shape = out;
        break;
      }
      case LayerSpec::Kind::kFlatten:
        shape = FeatureShape{1, 1, shape.size(), false};
        break;
      default:  // activation, dropout, batch_norm keep the shape
        break;
    }
    layer.output = shape;
  }
}

CategoricalFeatureSpec ParseCategorical(const YAML::Node& n, int index) {
  const std::string where = absl::StrCat("model.inputs.categorical[", index, "]");
  CheckKeys(n, where, {"name", "column", "vocab_size", "hashed", "embedding_dim", "combiner", "oov",
                       "separator", "bucket_width", "max_rows", "eviction", "initializer"});
  CategoricalFeatureSpec f;
  f.name = Str(Required(n, "name", where), where + ".name");
  if (f.name.empty()) Fail(n["name"], absl::StrCat(where, ".name must not be empty"));
  f.column = n["column"] ? Str(n["column"], where + ".column") : f.name;
  if (n["vocab_size"]) f.vocab_size = Int(n["vocab_size"], where + ".vocab_size", 1, JobLimits::kMaxVocab);
  if (n["hashed"]) f.hashed = Bool(n["hashed"], where + ".hashed");
  if ((f.vocab_size > 0) == f.hashed) {
    Fail(n, absl::StrCat(where, " ('", f.name,
                         "') needs exactly one of vocab_size: N (a fixed vocabulary) or hashed: true"));
  }
  if (n["embedding_dim"]) f.embedding_dim = Int(n["embedding_dim"], where + ".embedding_dim", 1, JobLimits::kMaxEmbeddingDim);
  if (YAML::Node c = n["combiner"]) {
    const std::string v = Str(c, where + ".combiner");
    if (v == "sum") f.combiner = Combiner::kSum;
    else if (v == "mean") f.combiner = Combiner::kMean;
    else Fail(c, absl::StrCat("unknown combiner '", v, "' (expected sum or mean)"));
  }
  if (YAML::Node o = n["oov"]) {
    const std::string v = Str(o, where + ".oov");
    if (v == "error") f.oov = OutOfVocabulary::kError;
    else if (v == "hash") f.oov = OutOfVocabulary::kHash;
    else Fail(o, absl::StrCat("unknown oov '", v, "' (expected error or hash)"));
    if (f.hashed) Fail(o, absl::StrCat(where, ".oov applies to a fixed vocabulary only"));
  }
  if (n["separator"]) {
    f.separator = Str(n["separator"], where + ".separator");
    if (f.separator.empty()) Fail(n["separator"], absl::StrCat(where, ".separator must not be empty"));
  }
  if (n["bucket_width"]) {
    f.bucket_width = Positive(n["bucket_width"], where + ".bucket_width");
  }
  if (n["max_rows"]) {
    if (!f.hashed) Fail(n["max_rows"], absl::StrCat(where, ".max_rows applies to hashed features only"));
    f.max_rows = Int(n["max_rows"], where + ".max_rows", 1, JobLimits::kMaxVocab);
  }
  if (YAML::Node e = n["eviction"]) {
    const std::string v = Str(e, where + ".eviction");
    if (v == "lfu") f.eviction = LFU;
    else if (v == "age") f.eviction = AGE;
    else Fail(e, absl::StrCat("unknown eviction '", v, "' (expected lfu or age)"));
  }
  f.initializer.set_type("random_uniform");
  f.initializer.set_minval(-0.05f);
  f.initializer.set_maxval(0.05f);
  if (n["initializer"]) f.initializer = ParseInitializer(n["initializer"], where + ".initializer");
  return f;
}

void ParseModel(const YAML::Node& n, ModelSpec* m) {
  CheckKeys(n, "model",
            {"inputs", "layers", "loss", "kernel_initializer", "bias_initializer", "l2"});
  YAML::Node inputs = Required(n, "inputs", "model");
  CheckKeys(inputs, "model.inputs", {"dense", "image", "categorical"});
  if (inputs["dense"]) m->dense_inputs = Int(inputs["dense"], "model.inputs.dense", 0, JobLimits::kMaxDenseInputs);
  if (YAML::Node image = inputs["image"]) {
    if (!image.IsSequence() || image.size() != 3) {
      Fail(image, "model.inputs.image must be [height, width, channels], e.g. [28, 28, 1]");
    }
    m->image.image = true;
    m->image.height = Int(image[0], "model.inputs.image[0]", 1, JobLimits::kMaxDenseInputs);
    m->image.width = Int(image[1], "model.inputs.image[1]", 1, JobLimits::kMaxDenseInputs);
    m->image.channels = Int(image[2], "model.inputs.image[2]", 1, JobLimits::kMaxDenseInputs);
    if (m->image.height * m->image.width > JobLimits::kMaxDenseInputs ||
        m->image.size() > JobLimits::kMaxDenseInputs) {
      Fail(image, absl::StrCat("model.inputs.image has more than ", JobLimits::kMaxDenseInputs,
                               " values (the stated limit)"));
    }
    if (inputs["dense"] && m->dense_inputs != m->image.size()) {
      Fail(inputs["dense"], absl::StrCat("model.inputs.dense is ", m->dense_inputs,
                                         " but model.inputs.image holds ", m->image.size(),
                                         " values (omit dense with image)"));
    }
    if (inputs["categorical"]) {
      Fail(inputs["categorical"], "model.inputs.image cannot be combined with categorical inputs");
    }
    m->dense_inputs = m->image.size();
  }
  if (YAML::Node cats = inputs["categorical"]) {
    if (!cats.IsSequence()) Fail(cats, "model.inputs.categorical must be a list of features");
    std::set<std::string> names;
    for (size_t i = 0; i < cats.size(); ++i) {
      m->categorical.push_back(ParseCategorical(cats[i], static_cast<int>(i)));
      if (!names.insert(m->categorical.back().name).second) {
        Fail(cats[i], absl::StrCat("duplicate categorical feature '", m->categorical.back().name, "'"));
      }
    }
  }
  if (m->dense_inputs == 0 && m->categorical.empty()) {
    Fail(inputs, "model.inputs needs dense: N (N >= 1) or at least one categorical feature");
  }
  YAML::Node layers = Required(n, "layers", "model");
  if (!layers.IsSequence() || layers.size() == 0) {
    Fail(layers, "model.layers must be a non-empty list of layers");
  }
  for (size_t i = 0; i < layers.size(); ++i) m->layers.push_back(ParseLayer(layers[i], static_cast<int>(i)));
  if (m->layers.back().kind != LayerSpec::Kind::kDense) {
    Fail(layers[layers.size() - 1], "the last layer must be dense (it produces the logits)");
  }
  InferShapes(layers, m);
  if (YAML::Node loss = n["loss"]) {
    // `loss: NAME`, or `loss: {type: huber, delta: D}`. (Assigning one
    // YAML::Node to another writes into the tree, so `type` is bound once.)
    if (loss.IsMap()) CheckKeys(loss, "model.loss", {"type", "delta"});
    const YAML::Node type = loss.IsMap() ? Required(loss, "type", "model.loss") : loss;
    m->loss = Str(type, "model.loss");
    if (m->loss != "softmax_cross_entropy" && m->loss != "sigmoid_cross_entropy" &&
        m->loss != "mse" && m->loss != "huber") {
      Fail(type, absl::StrCat("unknown loss '", m->loss,
                              "' (expected softmax_cross_entropy, sigmoid_cross_entropy, mse or "
                              "huber)"));
    }
    if (loss.IsMap() && loss["delta"]) {
      if (m->loss != "huber") Fail(loss["delta"], "model.loss.delta applies to huber only");
      m->huber_delta = Positive(loss["delta"], "model.loss.delta");
    }
  }
  if (n["l2"]) m->l2 = ParseL2(n["l2"], "model.l2");
  const int64_t outputs = m->layers.back().units;
  if (m->loss == "sigmoid_cross_entropy" && outputs != 1) {
    Fail(layers[layers.size() - 1],
         absl::StrCat("sigmoid_cross_entropy needs a last layer of 1 unit, not ", outputs));
  }
  if (m->loss == "softmax_cross_entropy" && outputs < 2) {
    Fail(layers[layers.size() - 1],
         "softmax_cross_entropy needs a last layer of at least 2 units (one per class)");
  }
  m->kernel_initializer.set_type("glorot_uniform");
  m->bias_initializer.set_type("zeros");
  if (n["kernel_initializer"]) {
    m->kernel_initializer = ParseInitializer(n["kernel_initializer"], "model.kernel_initializer");
  }
  if (n["bias_initializer"]) {
    m->bias_initializer = ParseInitializer(n["bias_initializer"], "model.bias_initializer");
  }
}

// optimizer.learning_rate: a number (a constant rate) or a schedule mapping
// (README "Learning rate"): o->learning_rate is then the schedule's peak
// and o->schedule the schedule, both before scale_with_replicas.
void ParseLearningRate(const YAML::Node& n, OptimizerProto* o, bool* scale_with_replicas) {
  const std::string where = "optimizer.learning_rate";
  if (!n.IsMap()) {
    o->set_learning_rate(Positive(n, where));
    return;
  }
  CheckKeys(n, where,
            {"initial", "warmup_steps", "warmup_from", "decay", "decay_steps", "decay_rate",
             "staircase", "step_size", "boundaries", "values", "alpha", "final",
             "scale_with_replicas"});
  using P = LearningRateScheduleProto;
  P s;
  const std::string decay = n["decay"] ? Str(n["decay"], where + ".decay") : "constant";
  // The keys each decay takes.
  std::set<std::string> takes;
  if (decay == "cosine") {
    s.set_decay(P::COSINE);
    takes = {"decay_steps", "alpha", "final"};
  } else if (decay == "exponential") {
    s.set_decay(P::EXPONENTIAL);
    takes = {"decay_steps", "decay_rate", "staircase"};
  } else if (decay == "step") {
    takes = {"step_size", "decay_rate", "boundaries", "values"};
  } else if (decay != "constant") {
    Fail(n["decay"], absl::StrCat("unknown ", where, ".decay '", decay,
                                  "' (expected constant, cosine, exponential or step)"));
  }
  for (const char* key : {"decay_steps", "decay_rate", "staircase", "step_size", "boundaries",
                          "values", "alpha", "final"}) {
    if (n[key] && !takes.count(key)) {
      Fail(n[key], absl::StrCat(where, ": decay '", decay, "' has no option '", key, "'"));
    }
  }
  auto steps = [&](const YAML::Node& v, const std::string& what, int64_t min_value) {
    return Int(v, what, min_value, kMaxScheduleSteps);
  };
  auto rate = [&](const YAML::Node& v, const std::string& what) {
    const double r = Num(v, what);
    if (!(std::isfinite(r) && r > 0)) Fail(v, absl::StrCat(what, " must be > 0, got ", r));
    return r;
  };
  auto decay_rate = [&]() {
    const YAML::Node v = Required(n, "decay_rate", where);
    const double r = Num(v, where + ".decay_rate");
    if (!(r > 0 && r <= 1)) Fail(v, absl::StrCat(where, ".decay_rate must be in (0, 1], got ", r));
    return r;
  };
  if (n["warmup_steps"]) s.set_warmup_steps(steps(n["warmup_steps"], where + ".warmup_steps", 0));
  if (YAML::Node f = n["warmup_from"]) {
    const double v = Num(f, where + ".warmup_from");
    if (!(std::isfinite(v) && v >= 0)) Fail(f, absl::StrCat(where, ".warmup_from must be >= 0, got ", v));
    if (s.warmup_steps() == 0) Fail(f, absl::StrCat(where, ".warmup_from needs warmup_steps > 0"));
    s.set_warmup_from(v);
  }
  if (decay == "step" && (n["boundaries"] || n["values"])) {
    // Keras' PiecewiseConstantDecay: absolute rates, the first the peak.
    if (n["step_size"] || n["decay_rate"]) {
      Fail(n, absl::StrCat(where, ": decay 'step' takes step_size and decay_rate, or boundaries "
                                  "and values, not both"));
    }
    if (n["initial"]) {
      Fail(n["initial"], absl::StrCat(where, ".initial is not used with values (the rate starts "
                                             "at values[0])"));
    }
    const YAML::Node b = Required(n, "boundaries", where);
    const YAML::Node v = Required(n, "values", where);
    if (!b.IsSequence() || b.size() == 0 || b.size() > kMaxScheduleBoundaries) {
      Fail(b, absl::StrCat(where, ".boundaries must be a list of 1 to ", kMaxScheduleBoundaries,
                           " steps"));
    }
    if (!v.IsSequence() || v.size() != b.size() + 1) {
      Fail(v, absl::StrCat(where, ".values must be a list of ", b.size() + 1,
                           " rates (one more than boundaries)"));
    }
    for (size_t i = 0; i < b.size(); ++i) {
      const std::string what = absl::StrCat(where, ".boundaries[", i, "]");
      s.add_boundaries(steps(b[i], what, i == 0 ? 0 : s.boundaries(i - 1) + 1));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      s.add_values(rate(v[i], absl::StrCat(where, ".values[", i, "]")));
    }
    s.set_decay(P::PIECEWISE_CONSTANT);
    s.set_initial(s.values(0));
  } else {
    s.set_initial(rate(Required(n, "initial", where), where + ".initial"));
  }
  if (decay == "step" && s.decay() != P::PIECEWISE_CONSTANT) {
    // Step decay: x decay_rate every step_size steps (ExponentialDecay with
    // staircase).
    s.set_decay(P::EXPONENTIAL);
    s.set_staircase(true);
    s.set_decay_steps(steps(Required(n, "step_size", where), where + ".step_size", 1));
    s.set_decay_rate(decay_rate());
  }
  if (decay == "exponential") {
    s.set_decay_steps(steps(Required(n, "decay_steps", where), where + ".decay_steps", 1));
    s.set_decay_rate(decay_rate());
    if (n["staircase"]) s.set_staircase(Bool(n["staircase"], where + ".staircase"));
  }
  if (decay == "cosine") {
    s.set_decay_steps(steps(Required(n, "decay_steps", where), where + ".decay_steps", 1));
    if (n["alpha"] && n["final"]) {
      Fail(n["final"], absl::StrCat(where, ": give alpha (a fraction of initial) or final (a "
                                           "rate), not both"));
    }
    if (YAML::Node a = n["alpha"]) {
      const double v = Num(a, where + ".alpha");
      if (!(v >= 0 && v <= 1)) Fail(a, absl::StrCat(where, ".alpha must be in [0, 1], got ", v));
      s.set_alpha(v);
    }
    if (YAML::Node f = n["final"]) {
      const double v = Num(f, where + ".final");
      if (!(v >= 0 && v <= s.initial())) {
        Fail(f, absl::StrCat(where, ".final must be in [0, initial (", s.initial(), ")], got ", v));
      }
      s.set_alpha(v / s.initial());
    }
  }
  if (YAML::Node r = n["scale_with_replicas"]) {
    const std::string v = Str(r, where + ".scale_with_replicas");
    if (v == "linear") *scale_with_replicas = true;
    else if (v != "none") Fail(r, absl::StrCat("unknown ", where, ".scale_with_replicas '", v, "' (expected none or linear)"));
  }
  if (o->type() == "ftrl" && !(s.decay() == P::CONSTANT && s.warmup_steps() == 0)) {
    Fail(n, "optimizer 'ftrl' takes a constant learning_rate (its update divides by the rate)");
  }
  if (absl::Status st = ValidateLearningRateSchedule(s); !st.ok()) {
    Fail(n, absl::StrCat("optimizer.", st.message()));
  }
  o->set_learning_rate(static_cast<float>(s.initial()));
  // A constant rate needs no schedule on the wire.
  if (s.decay() != P::CONSTANT || s.warmup_steps() > 0) *o->mutable_schedule() = s;
}

void ParseOptimizer(const YAML::Node& n, OptimizerProto* o, bool* scale_with_replicas) {
  CheckKeys(n, "optimizer", {"type", "learning_rate", "momentum", "nesterov",
                             "initial_accumulator_value", "beta1", "beta2", "epsilon",
                             "learning_rate_power", "l1", "l2", "beta"});
  YAML::Node type = Required(n, "type", "optimizer");
  o->set_type(Str(type, "optimizer.type"));
  o->set_learning_rate(0.01f);
  o->set_momentum(0.9f);
  o->set_initial_accumulator_value(0.1f);
  o->set_beta1(0.9f);
  o->set_beta2(0.999f);
  o->set_epsilon(1e-7f);
  o->set_learning_rate_power(-0.5f);
  if (o->type() == "adam") o->set_learning_rate(0.001f);
  const std::string& t = o->type();
  if (t != "sgd" && t != "momentum" && t != "adagrad" && t != "adam" && t != "ftrl") {
    Fail(type, absl::StrCat("unknown optimizer '", t,
                            "' (expected sgd, momentum, adagrad, adam or ftrl)"));
  }
  auto only_for = [&](const char* key, std::initializer_list<const char*> types) {
    if (!n[key]) return false;
    for (const char* ok : types) {
      if (t == ok) return true;
    }
    Fail(n[key], absl::StrCat("optimizer '", t, "' has no option '", key, "'"));
  };
  if (n["learning_rate"]) ParseLearningRate(n["learning_rate"], o, scale_with_replicas);
  if (only_for("momentum", {"momentum"})) {
    const double m = Num(n["momentum"], "optimizer.momentum");
    if (m < 0 || m >= 1) Fail(n["momentum"], "optimizer.momentum must be in [0, 1)");
    o->set_momentum(static_cast<float>(m));
  }
  if (only_for("nesterov", {"momentum"})) o->set_nesterov(Bool(n["nesterov"], "optimizer.nesterov"));
  if (only_for("initial_accumulator_value", {"adagrad", "ftrl"})) {
    o->set_initial_accumulator_value(
        Positive(n["initial_accumulator_value"], "optimizer.initial_accumulator_value"));
  }
  for (const char* key : {"beta1", "beta2"}) {
    if (only_for(key, {"adam"})) {
      const double b = Num(n[key], absl::StrCat("optimizer.", key));
      if (b < 0 || b >= 1) Fail(n[key], absl::StrCat("optimizer.", key, " must be in [0, 1)"));
      if (std::string(key) == "beta1") o->set_beta1(static_cast<float>(b));
      else o->set_beta2(static_cast<float>(b));
    }
  }
  if (only_for("epsilon", {"adam", "adagrad"})) o->set_epsilon(Positive(n["epsilon"], "optimizer.epsilon"));
  if (only_for("learning_rate_power", {"ftrl"})) {
    const double p = Num(n["learning_rate_power"], "optimizer.learning_rate_power");
    if (p > 0) Fail(n["learning_rate_power"], "optimizer.learning_rate_power must be <= 0");
    o->set_learning_rate_power(static_cast<float>(p));
  }
  for (const char* key : {"l1", "l2", "beta"}) {
    if (only_for(key, {"ftrl"})) {
      const double v = Num(n[key], absl::StrCat("optimizer.", key));
      if (v < 0) Fail(n[key], absl::StrCat("optimizer.", key, " must be >= 0"));
      const std::string k = key;
      if (k == "l1") o->set_l1(static_cast<float>(v));
      else if (k == "l2") o->set_l2(static_cast<float>(v));
      else o->set_beta(static_cast<float>(v));
    }
  }
}

void ParseColumns(const YAML::Node& n, const std::string& where, DataSourceSpec* d) {
  if (!n.IsSequence() || n.size() == 0) {
    Fail(n, absl::StrCat(where, " must be a list of {name: type} (types: int, float, string)"));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < n.size(); ++i) {
    const YAML::Node c = n[i];
    if (!c.IsMap() || c.size() != 1) {
      Fail(c, absl::StrCat(where, "[", i, "] must be one {name: type}, e.g. {rating: float}"));
    }
    ColumnSpec col;
    col.name = c.begin()->first.as<std::string>();
    const std::string type = Str(c.begin()->second, absl::StrCat(where, "[", i, "]"));
    if (type == "int") col.type = ColumnSpec::Type::kInt;
    else if (type == "float") col.type = ColumnSpec::Type::kFloat;
    else if (type == "string") col.type = ColumnSpec::Type::kString;
    else Fail(c.begin()->second, absl::StrCat("unknown column type '", type, "' (expected int, float or string)"));
    if (!names.insert(col.name).second) Fail(c, absl::StrCat("duplicate column '", col.name, "'"));
    d->columns.push_back(col);
  }
}

void ParseSource(const YAML::Node& n, const std::string& where, DataSourceSpec* d) {
  ExpectMap(n, where);
  if (n["format"]) d->format = Str(n["format"], where + ".format");
  if (d->format == "idx") {
    CheckKeys(n, where, {"format", "images", "labels", "limit"});
    d->images = Str(Required(n, "images", where), where + ".images");
    d->labels = Str(Required(n, "labels", where), where + ".labels");
  } else if (d->format == "csv") {
    CheckKeys(n, where, {"format", "path", "columns", "label", "dense_columns", "split", "limit"});
    d->path = Str(Required(n, "path", where), where + ".path");
    ParseColumns(Required(n, "columns", where), where + ".columns", d);
    YAML::Node label = Required(n, "label", where);
    CheckKeys(label, where + ".label", {"column", "threshold"});
    d->label_column = Str(Required(label, "column", where + ".label"), where + ".label.column");
    if (label["threshold"]) {
      d->has_label_threshold = true;
      d->label_threshold = Num(label["threshold"], where + ".label.threshold");
    }
    auto known = [&](const std::string& column, const YAML::Node& at) {
      for (const ColumnSpec& c : d->columns) {
        if (c.name == column) return c;
      }
      Fail(at, absl::StrCat("column '", column, "' is not among ", where, ".columns"));
    };
    if (known(d->label_column, label["column"]).type == ColumnSpec::Type::kString) {
      Fail(label["column"], "the label column must be int or float");
    }
    if (YAML::Node dense = n["dense_columns"]) {
      if (!dense.IsSequence()) Fail(dense, absl::StrCat(where, ".dense_columns must be a list"));
      for (size_t i = 0; i < dense.size(); ++i) {
        const std::string c = Str(dense[i], absl::StrCat(where, ".dense_columns[", i, "]"));
        if (known(c, dense[i]).type == ColumnSpec::Type::kString) {
          Fail(dense[i], absl::StrCat("dense column '", c, "' must be int or float"));
        }
        d->dense_columns.push_back(c);
      }
    }
    if (YAML::Node split = n["split"]) {
      CheckKeys(split, where + ".split", {"holdout_fraction", "seed", "part"});
      const double f = Num(Required(split, "holdout_fraction", where + ".split"),
                           where + ".split.holdout_fraction");
      if (!(f > 0 && f < 1)) Fail(split["holdout_fraction"], "holdout_fraction must be in (0, 1)");
      d->holdout_fraction = f;
      if (split["seed"]) d->holdout_seed = static_cast<uint64_t>(Int(split["seed"], where + ".split.seed", 0));
      const std::string part = Str(Required(split, "part", where + ".split"), where + ".split.part");
      if (part == "train") d->holdout_part = false;
      else if (part == "holdout") d->holdout_part = true;
      else Fail(split["part"], absl::StrCat("unknown split part '", part, "' (expected train or holdout)"));
    }
  } else if (d->format == "synthetic_ctr") {
    CheckKeys(n, where, {"format", "num_examples", "id_space", "zipf_exponent", "seed", "limit"});
    d->num_examples = Int(Required(n, "num_examples", where), where + ".num_examples", 1, JobLimits::kMaxExamples);
    if (n["id_space"]) d->id_space = Int(n["id_space"], where + ".id_space", 1, JobLimits::kMaxIdSpace);
    if (n["zipf_exponent"]) {
      d->zipf_exponent = Positive(n["zipf_exponent"], where + ".zipf_exponent");
    }
    if (n["seed"]) d->seed = static_cast<uint64_t>(Int(n["seed"], where + ".seed", 0));
  } else {
    Fail(n["format"], absl::StrCat("unknown data format '", d->format,
                                   "' (expected idx, csv or synthetic_ctr)"));
  }
  if (n["limit"]) d->limit = Int(n["limit"], where + ".limit", 0, JobLimits::kMaxExamples);
}

PartitionerSpec ParsePartitioner(const YAML::Node& n) {
  CheckKeys(n, "variable_partitioner",
            {"type", "num_shards", "min_shard_bytes", "max_shard_bytes", "max_shards",
             "bytes_per_string"});
  YAML::Node type = Required(n, "type", "variable_partitioner");
  const std::string t = Str(type, "variable_partitioner.type");
  PartitionerSpec p;
  auto only_for = [&](const char* key, const char* for_type) {
    if (!n[key]) return false;
    if (t != for_type && !(std::string(key) == "max_shards" && (t == "min_size" || t == "max_size"))) {
      Fail(n[key], absl::StrCat("partitioner '", t, "' has no option '", key, "'"));
    }
    return true;
  };
  if (t == "none") {
    p.type = PartitionerSpec::Type::kNone;
  } else if (t == "fixed") {
    p = PartitionerSpec::Fixed(Int(Required(n, "num_shards", "variable_partitioner"),
                                   "variable_partitioner.num_shards", 1, JobLimits::kMaxShards));
  } else if (t == "min_size") {
    p = PartitionerSpec::MinSize();
    if (only_for("min_shard_bytes", "min_size")) {
      p.min_shard_bytes = Int(n["min_shard_bytes"], "variable_partitioner.min_shard_bytes", 1);
    }
  } else if (t == "max_size") {
    p = PartitionerSpec::MaxSize(Int(Required(n, "max_shard_bytes", "variable_partitioner"),
                                     "variable_partitioner.max_shard_bytes", 1));
  } else {
    Fail(type, absl::StrCat("unknown partitioner '", t, "' (expected none, fixed, min_size or max_size)"));
  }
  if (t != "fixed") only_for("num_shards", "fixed");
  if (t != "max_size") only_for("max_shard_bytes", "max_size");
  if (t != "min_size") only_for("min_shard_bytes", "min_size");
  if (n["max_shards"]) {
    if (t != "min_size" && t != "max_size") {
      Fail(n["max_shards"], absl::StrCat("partitioner '", t, "' has no option 'max_shards'"));
    }
    p.max_shards = Int(n["max_shards"], "variable_partitioner.max_shards", t == "max_size" ? 0 : 1, JobLimits::kMaxShards);
  }
  if (n["bytes_per_string"]) {
    p.bytes_per_string = Int(n["bytes_per_string"], "variable_partitioner.bytes_per_string", 1);
  }
  if (absl::Status s = ValidatePartitioner(p); !s.ok()) Fail(n, std::string(s.message()));
  return p;
}

void ParseData(const YAML::Node& n, DataSpec* d) {
  CheckKeys(n, "data", {"train", "eval", "per_replica_batch", "global_batch", "shuffle"});
  ParseSource(Required(n, "train", "data"), "data.train", &d->train);
  ParseSource(Required(n, "eval", "data"), "data.eval", &d->eval);
  if (n["per_replica_batch"]) d->per_replica_batch = Int(n["per_replica_batch"], "data.per_replica_batch", 1, JobLimits::kMaxBatch);
  if (YAML::Node g = n["global_batch"]) {
    if (n["per_replica_batch"]) {
      Fail(g, "data: give per_replica_batch or global_batch, not both (the other is derived: "
              "global = per-replica x replicas)");
    }
    d->global_batch = Int(g, "data.global_batch", 1, JobLimits::kMaxGlobalBatch);
    d->global_batch_given = true;
    d->per_replica_batch = 0;  // ResolveReplicas derives it
  }
  if (n["shuffle"]) d->shuffle = Bool(n["shuffle"], "data.shuffle");
}

void ParseTrain(const YAML::Node& n, TrainSpec* t) {
  CheckKeys(n, "train", {"epochs", "steps_per_closure", "closures_per_worker", "closures_per_rpc"});
  if (n["epochs"]) t->epochs = Int(n["epochs"], "train.epochs", 1, JobLimits::kMaxEpochs);
  if (n["steps_per_closure"]) t->steps_per_closure = Int(n["steps_per_closure"], "train.steps_per_closure", 1, JobLimits::kMaxStepsPerClosure);
  if (n["closures_per_worker"]) {
    t->closures_per_worker = Int(n["closures_per_worker"], "train.closures_per_worker", 1, JobLimits::kMaxClosuresPerWorker);
  }
  if (n["closures_per_rpc"]) t->closures_per_rpc = Int(n["closures_per_rpc"], "train.closures_per_rpc", 1, JobLimits::kMaxClosuresPerRpc);
}

// The data must provide what the model's inputs need.
void CheckInputs(const YAML::Node& root, const JobSpec& spec) {
  for (const DataSourceSpec* d : {&spec.data.train, &spec.data.eval}) {
    const YAML::Node at = root["data"];
    if (d->format == "idx") {
      if (!spec.model.categorical.empty()) {
        Fail(at, "idx data has no categorical columns, but model.inputs.categorical is set");
      }
    } else if (d->format == "csv") {
      if (static_cast<int64_t>(d->dense_columns.size()) != spec.model.dense_inputs) {
        Fail(at, absl::StrCat("model.inputs.dense is ", spec.model.dense_inputs, " but the csv data names ",
                              d->dense_columns.size(), " dense_columns"));
      }
      for (const CategoricalFeatureSpec& f : spec.model.categorical) {
        bool found = false;
        for (const ColumnSpec& c : d->columns) {
          if (c.name != f.column) continue;
          found = true;
          if (!f.separator.empty() && c.type != ColumnSpec::Type::kString) {
            Fail(at, absl::StrCat("feature '", f.name, "' has a separator but column '", c.name,
                                  "' is not a string"));
          }
          if (f.bucket_width > 0 && c.type == ColumnSpec::Type::kString) {
            Fail(at, absl::StrCat("feature '", f.name, "' is bucketized but column '", c.name,
                                  "' is a string"));
          }
        }
        if (!found) {
          Fail(at, absl::StrCat("feature '", f.name, "' reads column '", f.column,
                                "', which the csv data does not declare"));
        }
      }
    } else if (d->format == "synthetic_ctr") {
      if (spec.model.categorical.empty() || spec.model.loss != "sigmoid_cross_entropy") {
        Fail(at, "synthetic_ctr data needs categorical inputs and sigmoid_cross_entropy");
      }
    }
  }
}

void ParseCheckpoint(const YAML::Node& n, CheckpointSpec* c) {
  CheckKeys(n, "checkpoint",
            {"dir", "every_steps", "every_seconds", "keep", "on_failure", "max_retries",
             "retry_backoff_s"});
  c->dir = Str(Required(n, "dir", "checkpoint"), "checkpoint.dir");
  if (c->dir.empty()) Fail(n["dir"], "checkpoint.dir must not be empty");
  if (n["every_steps"]) c->every_steps = Int(n["every_steps"], "checkpoint.every_steps", 0, JobLimits::kMaxExamples);
  if (n["every_seconds"]) {
    c->every_seconds = Num(n["every_seconds"], "checkpoint.every_seconds");
    if (c->every_seconds < 0) Fail(n["every_seconds"], "checkpoint.every_seconds must be >= 0");
  }
  if (n["keep"]) c->keep = Int(n["keep"], "checkpoint.keep", 1, JobLimits::kMaxCheckpointsKept);
  if (YAML::Node f = n["on_failure"]) {
    const std::string v = Str(f, "checkpoint.on_failure");
    if (v == "continue") c->on_failure = CheckpointSpec::OnFailure::kContinue;
    else if (v == "fail") c->on_failure = CheckpointSpec::OnFailure::kFail;
    else Fail(f, absl::StrCat("unknown checkpoint.on_failure '", v, "' (expected continue or fail)"));
  }
  if (n["max_retries"]) {
    c->max_retries = Int(n["max_retries"], "checkpoint.max_retries", 0, JobLimits::kMaxCheckpointRetries);
  }
  if (n["retry_backoff_s"]) {
    c->retry_backoff_s = Num(n["retry_backoff_s"], "checkpoint.retry_backoff_s");
    if (!(c->retry_backoff_s >= 0 && c->retry_backoff_s <= JobLimits::kMaxCheckpointBackoffSeconds)) {
      Fail(n["retry_backoff_s"], absl::StrCat("checkpoint.retry_backoff_s must be in [0, ",
                                              JobLimits::kMaxCheckpointBackoffSeconds, "]"));
    }
  }
}

void ParseFaultTolerance(const YAML::Node& n, FaultToleranceSpec* f) {
  CheckKeys(n, "fault_tolerance", {"max_attempts", "ps_recovery_timeout_s", "health_check_interval_s",
                                   "worker_timeout_s"});
  if (n["max_attempts"]) f->max_attempts = Int(n["max_attempts"], "fault_tolerance.max_attempts", 1, JobLimits::kMaxAttempts);
  if (n["ps_recovery_timeout_s"]) {
    f->ps_recovery_timeout_s = Positive(n["ps_recovery_timeout_s"], "fault_tolerance.ps_recovery_timeout_s");
  }
  if (n["health_check_interval_s"]) {
    f->health_check_interval_s =
        Positive(n["health_check_interval_s"], "fault_tolerance.health_check_interval_s");
  }
  if (n["worker_timeout_s"]) {
    f->worker_timeout_s = Positive(n["worker_timeout_s"], "fault_tolerance.worker_timeout_s");
    if (f->worker_timeout_s > JobLimits::kMaxWorkerTimeoutS) {
      Fail(n["worker_timeout_s"], absl::StrCat("fault_tolerance.worker_timeout_s must be <= ",
                                               JobLimits::kMaxWorkerTimeoutS,
                                               " (the stated limit), got ", f->worker_timeout_s));
    }
  }
  // A worker is lost only after failing more than one health check.
  if (!(f->worker_timeout_s > f->health_check_interval_s)) {
    Fail(n["worker_timeout_s"] ? n["worker_timeout_s"] : n,
         absl::StrCat("fault_tolerance.worker_timeout_s (", f->worker_timeout_s,
                      ") must be > health_check_interval_s (", f->health_check_interval_s, ")"));
  }
}

JobSpec ParseRoot(const YAML::Node& root) {
  if (!root || root.IsNull()) Fail(root, "the job spec is empty");
  CheckKeys(root, "the job spec",
            {"name", "strategy", "device", "devices", "seed", "model", "optimizer",
             "variable_partitioner", "data", "train", "checkpoint", "fault_tolerance"});
  JobSpec spec;
  spec.name = root["name"] ? Str(root["name"], "name") : "job";
  if (YAML::Node s = root["strategy"]) {
    const std::string v = Str(s, "strategy");
    if (v == "parameter_server") spec.strategy = Strategy::kParameterServer;
    else if (v == "one_device") spec.strategy = Strategy::kOneDevice;
    else if (v == "central_storage") spec.strategy = Strategy::kCentralStorage;
    else if (v == "mirrored") spec.strategy = Strategy::kMirrored;
    else if (v == "multi_worker_mirrored") spec.strategy = Strategy::kMultiWorkerMirrored;
    else Fail(s, absl::StrCat("unknown strategy '", v,
                              "' (expected parameter_server, central_storage, "
                              "multi_worker_mirrored, mirrored or one_device)"));
  }
  if (YAML::Node d = root["device"]) {
    const std::string v = Str(d, "device");
    if (v == "auto") spec.device = DevicePreference::kAuto;
    else if (v == "cpu") spec.device = DevicePreference::kCpu;
    else if (v == "cuda") spec.device = DevicePreference::kCuda;
    else Fail(d, absl::StrCat("unknown device '", v, "' (expected auto, cpu or cuda)"));
  }
  if (YAML::Node d = root["devices"]) {
    spec.devices = Int(d, "devices", 1, JobLimits::kMaxDevices);
    if (spec.strategy == Strategy::kOneDevice && spec.devices != 1) {
      Fail(d, absl::StrCat("strategy one_device trains on one device, not ", spec.devices,
                           ": use strategy: mirrored for several"));
    }
  }
  if (root["seed"]) spec.seed = static_cast<uint64_t>(Int(root["seed"], "seed", 0));
  ParseModel(Required(root, "model", "the job spec"), &spec.model);
  spec.model.kernel_initializer.set_seed(spec.seed);
  spec.model.bias_initializer.set_seed(spec.seed);
  ParseOptimizer(Required(root, "optimizer", "the job spec"), &spec.optimizer,
                 &spec.scale_lr_with_replicas);
  spec.base_optimizer = spec.optimizer;
  if (root["variable_partitioner"]) spec.partitioner = ParsePartitioner(root["variable_partitioner"]);
  ParseData(Required(root, "data", "the job spec"), &spec.data);
  CheckInputs(root, spec);
  if (root["train"]) ParseTrain(root["train"], &spec.train);
  if (root["checkpoint"]) ParseCheckpoint(root["checkpoint"], &spec.checkpoint);
  if (root["fault_tolerance"]) ParseFaultTolerance(root["fault_tolerance"], &spec.fault_tolerance);
  // What a worker holds per layer for one batch. Each factor is bounded
  // above, so the product does not overflow.
  // With global_batch given, the per-replica batch (known once the replicas
  // are) is at most the global one, which is checked instead.
  const int64_t batch =
      spec.data.global_batch_given ? spec.data.global_batch : spec.data.per_replica_batch;
  for (size_t i = 0; i < spec.model.layers.size(); ++i) {
    const LayerSpec& layer = spec.model.layers[i];
    // conv2d also holds its im2col patches: output positions x kernel x
    // input channels (each factor bounded, so the product fits).
    int64_t width = layer.output.size();
    if (layer.kind == LayerSpec::Kind::kConv2d) {
      width = std::max(width, layer.output.height * layer.output.width * layer.window_h *
                                  layer.window_w * layer.input.channels);
    }
    if (width > JobLimits::kMaxActivationElements ||
        batch * width > JobLimits::kMaxActivationElements) {
      Fail(root["data"]["per_replica_batch"] ? root["data"]["per_replica_batch"] : root["model"],
           absl::StrCat(spec.data.global_batch_given ? "global_batch " : "per_replica_batch ",
                        batch, " x width ", width, " of layer ", i,
                        " is ", batch * width, " activations, over the limit of ",
                        JobLimits::kMaxActivationElements, " (1 GiB of float32)"));
    }
  }
  return spec;
}

std::string Where(const std::string& filename, const YAML::Mark& mark) {
  if (mark.is_null()) return filename;
  return absl::StrCat(filename, ":", mark.line + 1, ":", mark.column + 1);
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& filename) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(filename, e.mark), ": ", e.msg));
  }
  try {
    JobSpec spec = ParseRoot(root);
    spec.yaml = yaml_text;
    return spec;
  } catch (const SpecError& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(filename, e.mark), ": ", e.message));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(filename, e.mark), ": ", e.msg));
  }
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read job spec '", path, "'"));
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseJobSpec(buf.str(), path);
}

std::vector<std::string> DataFiles(const JobSpec& spec) {
  std::vector<std::string> files;
  for (const DataSourceSpec* d : {&spec.data.train, &spec.data.eval}) {
    if (d->format == "idx") {
      files.push_back(d->images);
      files.push_back(d->labels);
    } else if (d->format == "csv") {
      files.push_back(d->path);
    }
  }
  return files;
}

std::vector<NamedDataFile> NamedDataFiles(const JobSpec& spec) {
  std::vector<NamedDataFile> files;
  for (const auto& [part, d] :
       {std::pair<const char*, const DataSourceSpec*>{"train", &spec.data.train},
        {"eval", &spec.data.eval}}) {
    const std::string prefix = absl::StrCat("data.", part, ".");
    if (d->format == "idx") {
      files.push_back({prefix + "images", d->images});
      files.push_back({prefix + "labels", d->labels});
    } else if (d->format == "csv") {
      files.push_back({prefix + "path", d->path});
    }
  }
  return files;
}

int64_t ReplicasFor(const JobSpec& spec, int64_t workers) {
  switch (spec.strategy) {
    case Strategy::kOneDevice: return 1;
    case Strategy::kMirrored: return spec.devices;
    default: return workers * spec.devices;
  }
}

int64_t StepExamples(const JobSpec& spec) {
  if (IsSynchronous(spec.strategy)) return spec.data.global_batch;
  return spec.data.per_replica_batch * spec.devices;
}

int64_t SyncShares(const JobSpec& spec) {
  return std::max<int64_t>(1, spec.replicas / spec.devices);
}

absl::Status ResolveReplicas(int64_t replicas, JobSpec* spec) {
  if (replicas < 1 || replicas > JobLimits::kMaxReplicas) {
    return absl::InvalidArgumentError(absl::StrCat("a job runs on 1 to ", JobLimits::kMaxReplicas,
                                                   " replicas, not ", replicas));
  }
  DataSpec& d = spec->data;
  const char* what = spec->strategy == Strategy::kOneDevice ? ""
                     : spec->strategy == Strategy::kMirrored ? " (devices)"
                     : spec->devices > 1                     ? " (workers x devices)"
                                                             : " (one per worker)";
  if (d.global_batch_given) {
    if (d.global_batch % replicas != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.global_batch ", d.global_batch, " does not divide evenly by the job's ", replicas,
          " replicas", what, ": give a multiple of ", replicas, ", or per_replica_batch"));
    }
    if (d.global_batch / replicas > JobLimits::kMaxBatch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.global_batch ", d.global_batch, " over ", replicas, " replicas", what, " is ",
          d.global_batch / replicas, " per replica, over the limit of ", JobLimits::kMaxBatch));
    }
    d.per_replica_batch = d.global_batch / replicas;
  } else {
    d.global_batch = d.per_replica_batch * replicas;
  }
  if (spec->scale_lr_with_replicas) {
    // From the rates the YAML gave, so that resolving again does not scale twice.
    OptimizerProto& o = spec->optimizer;
    o = spec->base_optimizer;
    const double factor = static_cast<double>(replicas);
    o.set_learning_rate(static_cast<float>(o.learning_rate() * factor));
    if (o.has_schedule()) *o.mutable_schedule() = ScaleLearningRateSchedule(o.schedule(), factor);
  }
  spec->replicas = replicas;
  return absl::OkStatus();
}

const char* StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kOneDevice: return "one_device";
    case Strategy::kCentralStorage: return "central_storage";
    case Strategy::kMirrored: return "mirrored";
    case Strategy::kMultiWorkerMirrored: return "multi_worker_mirrored";
    default: return "parameter_server";
  }
}

const char* DeviceName(DevicePreference d) {
  switch (d) {
    case DevicePreference::kCpu: return "cpu";
    case DevicePreference::kCuda: return "cuda";
    default: return "auto";
  }
}

}  // namespace pscluster
