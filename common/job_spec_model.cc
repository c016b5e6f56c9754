// The `model` part of a job spec: inputs, categorical features, layers
// (with their shapes inferred), loss, initializers.
#include <algorithm>
#include <cmath>
#include <set>

#include "common/initializer.h"
#include "common/job_spec_parse.h"

namespace pscluster {
namespace job_spec_internal {
namespace {

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

LayerSpec ParseLayer(const YAML::Node& n, const std::string& where) {
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
  if (kind == "cross") {
    layer.kind = LayerSpec::Kind::kCross;
    if (!empty_body) {
      CheckKeys(body, at, {"rank", "l2"});
      if (body["rank"]) layer.rank = Int(body["rank"], at + ".rank", 1, JobLimits::kMaxUnits);
      if (body["l2"]) {
        layer.has_l2 = true;
        layer.l2 = ParseL2(body["l2"], at + ".l2");
      }
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
                    "cross, relu, tanh, sigmoid or gelu)"));
}

// The width of the first layer's input: the dense inputs and every
// categorical feature's embedding but those of the wide part.
int64_t DeepInputWidth(const ModelSpec& m) {
  const std::set<std::string> wide(m.wide_categorical.begin(), m.wide_categorical.end());
  int64_t width = m.dense_inputs;
  for (const CategoricalFeatureSpec& f : m.categorical) {
    if (wide.count(f.name) == 0) width += f.embedding_dim;
  }
  return width;
}

// model.fm and model.wide (ModelSpec): checked against the inputs.
void ParseHeads(const YAML::Node& n, ModelSpec* m) {
  if (YAML::Node wide = n["wide"]) {
    if (!wide.IsMap()) Fail(wide, "model.wide must be a mapping {categorical: [names], dense: bool}");
    CheckKeys(wide, "model.wide", {"categorical", "dense"});
    if (YAML::Node cats = wide["categorical"]) {
      if (!cats.IsSequence()) Fail(cats, "model.wide.categorical must be a list of feature names");
      for (size_t i = 0; i < cats.size(); ++i) {
        const std::string name = Str(cats[i], absl::StrCat("model.wide.categorical[", i, "]"));
        auto f = std::find_if(m->categorical.begin(), m->categorical.end(),
                              [&](const CategoricalFeatureSpec& c) { return c.name == name; });
        if (f == m->categorical.end()) {
          Fail(cats[i], absl::StrCat("model.wide.categorical names '", name,
                                     "', which is not a feature of model.inputs.categorical"));
        }
        if (f->embedding_dim != 1) {
          Fail(cats[i], absl::StrCat("model.wide.categorical: feature '", name,
                                     "' needs embedding_dim: 1 (a weight per id), not ",
                                     f->embedding_dim));
        }
        if (std::count(m->wide_categorical.begin(), m->wide_categorical.end(), name) > 0) {
          Fail(cats[i], absl::StrCat("model.wide.categorical names '", name, "' twice"));
        }
        m->wide_categorical.push_back(name);
      }
    }
    if (wide["dense"]) {
      m->wide_dense = Bool(wide["dense"], "model.wide.dense");
      if (m->wide_dense && m->dense_inputs == 0) {
        Fail(wide["dense"], "model.wide.dense needs dense inputs (model.inputs.dense)");
      }
    }
    if (m->wide_categorical.empty() && !m->wide_dense) {
      Fail(wide, "model.wide needs categorical: [names] or dense: true");
    }
    if (DeepInputWidth(*m) == 0) {
      Fail(wide, "model.wide takes every input: the deep layers need at least one input "
                 "(a dense input or a categorical feature not in model.wide.categorical)");
    }
  }
  if (YAML::Node fm = n["fm"]) {
    m->fm = Bool(fm, "model.fm");
    if (!m->fm) return;
    int64_t fields = 0, dim = 0;
    for (const CategoricalFeatureSpec& f : m->categorical) {
      if (std::count(m->wide_categorical.begin(), m->wide_categorical.end(), f.name) > 0) continue;
      if (fields > 0 && f.embedding_dim != dim) {
        Fail(fm, absl::StrCat("model.fm needs one embedding_dim for every categorical feature "
                              "outside model.wide, but '", f.name, "' has ", f.embedding_dim,
                              " and the ones before it ", dim));
      }
      dim = f.embedding_dim;
      ++fields;
    }
    if (fields < 2) {
      Fail(fm, absl::StrCat("model.fm needs at least 2 categorical features outside model.wide "
                            "(it sums their pairwise dot products), not ", fields));
    }
  }
}

// model.bottom (DLRM): dense layers over the dense inputs, the last as wide
// as every embedding. Before InferShapes, which reads it.
void ParseBottom(const YAML::Node& bottom, ModelSpec* m) {
  if (!bottom.IsSequence() || bottom.size() == 0) {
    Fail(bottom, "model.bottom must be a non-empty list of dense layers");
  }
  if (m->dense_inputs == 0 || m->categorical.empty()) {
    Fail(bottom, "model.bottom (DLRM) needs dense inputs and at least one categorical feature");
  }
  if (m->fm || !m->wide_categorical.empty() || m->wide_dense) {
    Fail(bottom, "model.bottom (DLRM) cannot be combined with model.fm or model.wide");
  }
  int64_t width = m->dense_inputs;
  for (size_t i = 0; i < bottom.size(); ++i) {
    const std::string where = absl::StrCat("model.bottom[", i, "]");
    LayerSpec layer = ParseLayer(bottom[i], where);
    if (layer.kind != LayerSpec::Kind::kDense) {
      Fail(bottom[i], absl::StrCat(where, ": model.bottom takes dense layers only"));
    }
    layer.input = FeatureShape{1, 1, width, false};
    layer.output = FeatureShape{1, 1, layer.units, false};
    width = layer.units;
    m->bottom.push_back(layer);
  }
  for (const CategoricalFeatureSpec& f : m->categorical) {
    if (f.embedding_dim != width) {
      Fail(bottom[bottom.size() - 1],
           absl::StrCat("model.bottom ends in ", width, " units, but feature '", f.name,
                        "' has embedding_dim ", f.embedding_dim,
                        ": DLRM's dot interaction needs them all equal"));
    }
  }
}

// A cross layer's kernel is [width, width]: 2^13 keeps it under 256 MiB.
constexpr int64_t kMaxCrossWidth = int64_t{1} << 13;

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
  } else if (!m->bottom.empty()) {
    // DLRM: the top MLP reads [z0 | the pairwise dots of z0..zF].
    const int64_t vectors = static_cast<int64_t>(m->categorical.size()) + 1;
    shape.channels = m->bottom.back().units + vectors * (vectors - 1) / 2;
  } else {
    shape.channels = DeepInputWidth(*m);
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
      case LayerSpec::Kind::kCross: {
        if (!m->bottom.empty()) {
          Fail(at, absl::StrCat(where, ": cross cannot follow model.bottom (DLRM has no single "
                                "input x0)"));
        }
        // x0 * (x W + b) + x: x must be as wide as the model's input x0.
        const int64_t x0 = DeepInputWidth(*m);
        if (m->image.image || shape.image || shape.channels != x0) {
          Fail(at, absl::StrCat(where, ": cross needs an input as wide as the model's input (",
                                x0, " = dense + embedding dims), but its input has ",
                                shape.size(), " values: put cross layers first, before any "
                                "dense layer, and not on images"));
        }
        if (layer.rank >= x0) {
          Fail(at, absl::StrCat(where, ": cross rank ", layer.rank, " must be below its width ",
                                x0, " (omit rank for the full-rank layer)"));
        }
        if (layer.rank == 0 && x0 > kMaxCrossWidth) {
          Fail(at, absl::StrCat(where, ": cross has a [", x0, ", ", x0, "] kernel; its input "
                                "width must be at most ", kMaxCrossWidth));
        }
        break;
      }
      default:  // activation, dropout, batch_norm keep the shape
        break;
    }
    layer.output = shape;
  }
}

CategoricalFeatureSpec ParseCategorical(const YAML::Node& n, int index) {
  const std::string where = absl::StrCat("model.inputs.categorical[", index, "]");
  CheckKeys(n, where, {"name", "column", "vocab_size", "hashed", "embedding_dim", "combiner", "oov",
                       "separator", "bucket_width", "boundaries", "cross", "max_rows", "eviction",
                       "initializer"});
  CategoricalFeatureSpec f;
  f.name = Str(Required(n, "name", where), where + ".name");
  if (f.name.empty()) Fail(n["name"], absl::StrCat(where, ".name must not be empty"));
  if (YAML::Node cross = n["cross"]) {
    if (n["column"]) Fail(n["column"], absl::StrCat(where, " has both column and cross (a cross names its columns)"));
    if (!cross.IsSequence() || cross.size() < 2) {
      Fail(cross, absl::StrCat(where, ".cross must be a list of two or more columns"));
    }
    for (size_t i = 0; i < cross.size(); ++i) {
      const std::string c = Str(cross[i], absl::StrCat(where, ".cross[", i, "]"));
      for (const std::string& seen : f.cross) {
        if (seen == c) Fail(cross[i], absl::StrCat(where, ".cross names column '", c, "' twice"));
      }
      f.cross.push_back(c);
    }
    if (n["separator"]) {
      Fail(n["separator"], absl::StrCat(where, ".separator: a cross reads single-valued columns"));
    }
  } else {
    f.column = n["column"] ? Str(n["column"], where + ".column") : f.name;
  }
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
  if (YAML::Node b = n["boundaries"]) {
    if (n["bucket_width"]) Fail(b, absl::StrCat(where, " has both bucket_width and boundaries"));
    if (!b.IsSequence() || b.size() == 0) {
      Fail(b, absl::StrCat(where, ".boundaries must be a non-empty list of numbers"));
    }
    if (b.size() > static_cast<size_t>(JobLimits::kMaxBoundaries)) {
      Fail(b, absl::StrCat(where, ".boundaries has ", b.size(), " entries, over the limit of ",
                           JobLimits::kMaxBoundaries));
    }
    for (size_t i = 0; i < b.size(); ++i) {
      const double v = Num(b[i], absl::StrCat(where, ".boundaries[", i, "]"));
      if (!std::isfinite(v)) Fail(b[i], absl::StrCat(where, ".boundaries[", i, "] must be finite"));
      if (i > 0 && !(v > f.boundaries.back())) {
        Fail(b[i], absl::StrCat(where, ".boundaries must be strictly increasing"));
      }
      f.boundaries.push_back(v);
    }
    // Bucket ids lie in [0, boundaries.size()]; a fixed vocabulary (without
    // oov: hash) must hold them all.
    if (f.cross.empty() && f.vocab_size > 0 && f.oov == OutOfVocabulary::kError &&
        f.vocab_size <= static_cast<int64_t>(f.boundaries.size())) {
      Fail(b, absl::StrCat(where, ".boundaries give bucket ids 0..", f.boundaries.size(),
                           ", outside vocab_size ", f.vocab_size));
    }
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

}  // namespace

void ParseModel(const YAML::Node& n, ModelSpec* m) {
  CheckKeys(n, "model",
            {"inputs", "layers", "loss", "kernel_initializer", "bias_initializer", "l2", "fm",
             "wide", "bottom"});
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
  ParseHeads(n, m);
  YAML::Node layers = Required(n, "layers", "model");
  if (!layers.IsSequence() || layers.size() == 0) {
    Fail(layers, "model.layers must be a non-empty list of layers");
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    m->layers.push_back(ParseLayer(layers[i], absl::StrCat("model.layers[", i, "]")));
  }
  if (YAML::Node bottom = n["bottom"]) ParseBottom(bottom, m);
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
  if ((m->fm || !m->wide_categorical.empty() || m->wide_dense) && outputs != 1) {
    Fail(n[m->fm ? "fm" : "wide"],
         absl::StrCat("model.", m->fm ? "fm" : "wide", " adds to a single logit: the last layer "
                      "needs 1 unit, not ", outputs));
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

}  // namespace job_spec_internal
}  // namespace pscluster
