#include "common/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/initializer.h"

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
  if (a == "none" || a == "linear") return Activation::kNone;
  Fail(n, absl::StrCat("unknown activation '", a, "' (expected relu or none)"));
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
  if (kind == "relu") {
    layer.kind = LayerSpec::Kind::kRelu;
    if (body && !body.IsNull() && !(body.IsMap() && body.size() == 0)) {
      Fail(body, absl::StrCat(where, ": relu takes no options"));
    }
    return layer;
  }
  if (kind == "dense") {
    if (!body) Fail(n, absl::StrCat(where, ": dense needs {units: N}"));
    CheckKeys(body, where + ".dense", {"units", "activation"});
    layer.kind = LayerSpec::Kind::kDense;
    layer.units = Int(Required(body, "units", where + ".dense"), where + ".dense.units", 1, JobLimits::kMaxUnits);
    if (body["activation"]) layer.activation = ParseActivation(body["activation"]);
    return layer;
  }
  Fail(n.IsMap() ? n.begin()->first : n,
       absl::StrCat("unknown layer '", kind, "' in ", where, " (expected dense or relu)"));
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
  CheckKeys(n, "model", {"inputs", "layers", "loss", "kernel_initializer", "bias_initializer"});
  YAML::Node inputs = Required(n, "inputs", "model");
  CheckKeys(inputs, "model.inputs", {"dense", "categorical"});
  if (inputs["dense"]) m->dense_inputs = Int(inputs["dense"], "model.inputs.dense", 0, JobLimits::kMaxDenseInputs);
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
  if (n["loss"]) {
    m->loss = Str(n["loss"], "model.loss");
    if (m->loss != "softmax_cross_entropy" && m->loss != "sigmoid_cross_entropy") {
      Fail(n["loss"], absl::StrCat("unknown loss '", m->loss,
                                   "' (expected softmax_cross_entropy or sigmoid_cross_entropy)"));
    }
  }
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

void ParseOptimizer(const YAML::Node& n, OptimizerProto* o) {
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
  if (n["learning_rate"]) o->set_learning_rate(Positive(n["learning_rate"], "optimizer.learning_rate"));
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
  CheckKeys(n, "data", {"train", "eval", "per_replica_batch", "shuffle"});
  ParseSource(Required(n, "train", "data"), "data.train", &d->train);
  ParseSource(Required(n, "eval", "data"), "data.eval", &d->eval);
  if (n["per_replica_batch"]) d->per_replica_batch = Int(n["per_replica_batch"], "data.per_replica_batch", 1, JobLimits::kMaxBatch);
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
            {"name", "strategy", "device", "seed", "model", "optimizer", "variable_partitioner",
             "data", "train", "checkpoint", "fault_tolerance"});
  JobSpec spec;
  spec.name = root["name"] ? Str(root["name"], "name") : "job";
  if (YAML::Node s = root["strategy"]) {
    const std::string v = Str(s, "strategy");
    if (v == "parameter_server") spec.strategy = Strategy::kParameterServer;
    else if (v == "one_device") spec.strategy = Strategy::kOneDevice;
    else Fail(s, absl::StrCat("unknown strategy '", v, "' (expected parameter_server or one_device)"));
  }
  if (YAML::Node d = root["device"]) {
    const std::string v = Str(d, "device");
    if (v == "auto") spec.device = DevicePreference::kAuto;
    else if (v == "cpu") spec.device = DevicePreference::kCpu;
    else if (v == "cuda") spec.device = DevicePreference::kCuda;
    else Fail(d, absl::StrCat("unknown device '", v, "' (expected auto, cpu or cuda)"));
  }
  if (root["seed"]) spec.seed = static_cast<uint64_t>(Int(root["seed"], "seed", 0));
  ParseModel(Required(root, "model", "the job spec"), &spec.model);
  spec.model.kernel_initializer.set_seed(spec.seed);
  spec.model.bias_initializer.set_seed(spec.seed);
  ParseOptimizer(Required(root, "optimizer", "the job spec"), &spec.optimizer);
  if (root["variable_partitioner"]) spec.partitioner = ParsePartitioner(root["variable_partitioner"]);
  ParseData(Required(root, "data", "the job spec"), &spec.data);
  CheckInputs(root, spec);
  if (root["train"]) ParseTrain(root["train"], &spec.train);
  if (root["checkpoint"]) ParseCheckpoint(root["checkpoint"], &spec.checkpoint);
  if (root["fault_tolerance"]) ParseFaultTolerance(root["fault_tolerance"], &spec.fault_tolerance);
  // What a worker holds per layer for one batch. Each factor is bounded
  // above, so the product does not overflow.
  const int64_t batch = spec.data.per_replica_batch;
  int64_t width = spec.model.dense_inputs;
  for (const CategoricalFeatureSpec& f : spec.model.categorical) width += f.embedding_dim;
  for (size_t i = 0; i < spec.model.layers.size(); ++i) {
    if (spec.model.layers[i].units > 0) width = spec.model.layers[i].units;
    if (batch * width > JobLimits::kMaxActivationElements) {
      Fail(root["data"]["per_replica_batch"] ? root["data"]["per_replica_batch"] : root["model"],
           absl::StrCat("per_replica_batch ", batch, " x width ", width, " of layer ", i,
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

const char* StrategyName(Strategy s) {
  return s == Strategy::kOneDevice ? "one_device" : "parameter_server";
}

const char* DeviceName(DevicePreference d) {
  switch (d) {
    case DevicePreference::kCpu: return "cpu";
    case DevicePreference::kCuda: return "cuda";
    default: return "auto";
  }
}

}  // namespace pscluster
