#include "common/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
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
int64_t Int(const YAML::Node& n, const std::string& what, int64_t min_value) {
  const int64_t v = Scalar<int64_t>(n, what, "an integer");
  if (v < min_value) Fail(n, absl::StrCat(what, " must be >= ", min_value, ", got ", v));
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
    layer.units = Int(Required(body, "units", where + ".dense"), where + ".dense.units", 1);
    if (body["activation"]) layer.activation = ParseActivation(body["activation"]);
    return layer;
  }
  Fail(n.IsMap() ? n.begin()->first : n,
       absl::StrCat("unknown layer '", kind, "' in ", where, " (expected dense or relu)"));
}

void ParseModel(const YAML::Node& n, ModelSpec* m) {
  CheckKeys(n, "model", {"inputs", "layers", "loss", "kernel_initializer", "bias_initializer"});
  YAML::Node inputs = Required(n, "inputs", "model");
  CheckKeys(inputs, "model.inputs", {"dense"});
  m->dense_inputs = Int(Required(inputs, "dense", "model.inputs"), "model.inputs.dense", 1);
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
    if (m->loss != "softmax_cross_entropy") {
      Fail(n["loss"], absl::StrCat("unknown loss '", m->loss, "' (expected softmax_cross_entropy)"));
    }
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
                             "initial_accumulator_value", "beta1", "beta2", "epsilon"});
  YAML::Node type = Required(n, "type", "optimizer");
  o->set_type(Str(type, "optimizer.type"));
  o->set_learning_rate(0.01f);
  o->set_momentum(0.9f);
  o->set_initial_accumulator_value(0.1f);
  o->set_beta1(0.9f);
  o->set_beta2(0.999f);
  o->set_epsilon(1e-7f);
  if (o->type() == "adam") o->set_learning_rate(0.001f);
  const std::string& t = o->type();
  if (t != "sgd" && t != "momentum" && t != "adagrad" && t != "adam") {
    Fail(type, absl::StrCat("unknown optimizer '", t, "' (expected sgd, momentum, adagrad or adam)"));
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
  if (only_for("initial_accumulator_value", {"adagrad"})) {
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
}

void ParseSource(const YAML::Node& n, const std::string& where, DataSourceSpec* d) {
  CheckKeys(n, where, {"format", "images", "labels", "limit"});
  if (n["format"]) {
    d->format = Str(n["format"], where + ".format");
    if (d->format != "idx") {
      Fail(n["format"], absl::StrCat("unknown data format '", d->format, "' (expected idx)"));
    }
  }
  d->images = Str(Required(n, "images", where), where + ".images");
  d->labels = Str(Required(n, "labels", where), where + ".labels");
  if (n["limit"]) d->limit = Int(n["limit"], where + ".limit", 0);
}

void ParseData(const YAML::Node& n, DataSpec* d) {
  CheckKeys(n, "data", {"train", "eval", "per_replica_batch", "shuffle"});
  ParseSource(Required(n, "train", "data"), "data.train", &d->train);
  ParseSource(Required(n, "eval", "data"), "data.eval", &d->eval);
  if (n["per_replica_batch"]) d->per_replica_batch = Int(n["per_replica_batch"], "data.per_replica_batch", 1);
  if (n["shuffle"]) d->shuffle = Bool(n["shuffle"], "data.shuffle");
}

void ParseTrain(const YAML::Node& n, TrainSpec* t) {
  CheckKeys(n, "train", {"epochs", "steps_per_closure", "closures_per_worker"});
  if (n["epochs"]) t->epochs = Int(n["epochs"], "train.epochs", 1);
  if (n["steps_per_closure"]) t->steps_per_closure = Int(n["steps_per_closure"], "train.steps_per_closure", 1);
  if (n["closures_per_worker"]) {
    t->closures_per_worker = Int(n["closures_per_worker"], "train.closures_per_worker", 1);
  }
}

JobSpec ParseRoot(const YAML::Node& root) {
  if (!root || root.IsNull()) Fail(root, "the job spec is empty");
  CheckKeys(root, "the job spec",
            {"name", "strategy", "device", "seed", "model", "optimizer", "data", "train"});
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
  ParseData(Required(root, "data", "the job spec"), &spec.data);
  if (root["train"]) ParseTrain(root["train"], &spec.train);
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
