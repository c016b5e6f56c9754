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
#include "common/job_spec_parse.h"
#include "common/lr_schedule.h"

namespace pscluster {
namespace {

using job_spec_internal::Bool;
using job_spec_internal::CheckKeys;
using job_spec_internal::CheckStreaming;
using job_spec_internal::Describe;
using job_spec_internal::ExpectMap;
using job_spec_internal::Fail;
using job_spec_internal::Int;
using job_spec_internal::Num;
using job_spec_internal::Positive;
using job_spec_internal::ParseStream;
using job_spec_internal::Required;
using job_spec_internal::SpecError;
using job_spec_internal::Str;
using job_spec_internal::ParseModel;
using job_spec_internal::ParseOptimizer;

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
    if (n["labels"]) {
      d->labels = Str(n["labels"], where + ".labels");
    } else {
      d->labelled = false;
    }
  } else if (d->format == "csv" || d->format == "tfrecord") {
    if (d->format == "csv") {
      CheckKeys(n, where, {"format", "path", "columns", "label", "dense_columns", "split", "limit",
                           "delimiter", "header", "stream"});
    } else {
      CheckKeys(n, where, {"format", "path", "columns", "label", "dense_columns", "stream"});
    }
    const YAML::Node path = Required(n, "path", where);
    if (path.IsSequence()) {
      if (path.size() == 0) Fail(path, absl::StrCat(where, ".path must name at least one file"));
      if (path.size() > static_cast<size_t>(JobLimits::kMaxDataFiles)) {
        Fail(path, absl::StrCat(where, ".path lists ", path.size(), " files, over the limit of ",
                                JobLimits::kMaxDataFiles));
      }
      for (size_t i = 0; i < path.size(); ++i) {
        d->paths.push_back(Str(path[i], absl::StrCat(where, ".path[", i, "]")));
      }
      d->path = d->paths.front();
    } else {
      d->path = Str(path, where + ".path");
    }
    ParseColumns(Required(n, "columns", where), where + ".columns", d);
    if (YAML::Node delim = n["delimiter"]) {
      const std::string v = Str(delim, where + ".delimiter");
      if (v.size() != 1 || v == "\"" || v == "\n" || v == "\r") {
        Fail(delim, absl::StrCat(where, ".delimiter must be one byte other than a quote or a line "
                                 "break (e.g. \",\" or \"\\t\")"));
      }
      d->delimiter = v[0];
    }
    if (n["header"]) d->header = Bool(n["header"], where + ".header");
    auto known = [&](const std::string& column, const YAML::Node& at) {
      for (const ColumnSpec& c : d->columns) {
        if (c.name == column) return c;
      }
      Fail(at, absl::StrCat("column '", column, "' is not among ", where, ".columns"));
    };
    if (YAML::Node label = n["label"]) {
      CheckKeys(label, where + ".label", {"column", "threshold"});
      d->label_column = Str(Required(label, "column", where + ".label"), where + ".label.column");
      if (label["threshold"]) {
        d->has_label_threshold = true;
        d->label_threshold = Num(label["threshold"], where + ".label.threshold");
      }
      if (known(d->label_column, label["column"]).type == ColumnSpec::Type::kString) {
        Fail(label["column"], "the label column must be int or float");
      }
    } else {
      d->labelled = false;
    }
    if (YAML::Node dense = n["dense_columns"]) {
      if (!dense.IsSequence()) Fail(dense, absl::StrCat(where, ".dense_columns must be a list"));
      for (size_t i = 0; i < dense.size(); ++i) {
        // A column name, or {column: NAME, transform: none|log1p}.
        const std::string at = absl::StrCat(where, ".dense_columns[", i, "]");
        // (YAML::Node's operator= writes through to the tree: bind once.)
        const YAML::Node column = dense[i].IsMap() ? Required(dense[i], "column", at) : dense[i];
        DataSourceSpec::DenseTransform transform = DataSourceSpec::DenseTransform::kNone;
        if (dense[i].IsMap()) {
          CheckKeys(dense[i], at, {"column", "transform"});
          if (YAML::Node t = dense[i]["transform"]) {
            const std::string v = Str(t, at + ".transform");
            if (v == "log1p") transform = DataSourceSpec::DenseTransform::kLog1p;
            else if (v != "none") Fail(t, absl::StrCat("unknown transform '", v, "' (expected none or log1p)"));
          }
        }
        const std::string c = Str(column, dense[i].IsMap() ? at + ".column" : at);
        if (known(c, column).type == ColumnSpec::Type::kString) {
          Fail(column, absl::StrCat("dense column '", c, "' must be int or float"));
        }
        d->dense_columns.push_back(c);
        d->dense_transforms.push_back(transform);
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
    if (d->format == "tfrecord" || n["stream"]) ParseStream(n, where, d);
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
                                   "' (expected idx, csv, tfrecord or synthetic_ctr)"));
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
  CheckKeys(n, "train", {"epochs", "steps_per_closure", "closures_per_worker", "closures_per_rpc",
                         "max_staleness", "staleness_lr"});
  if (n["epochs"]) t->epochs = Int(n["epochs"], "train.epochs", 1, JobLimits::kMaxEpochs);
  if (n["steps_per_closure"]) t->steps_per_closure = Int(n["steps_per_closure"], "train.steps_per_closure", 1, JobLimits::kMaxStepsPerClosure);
  if (n["closures_per_worker"]) {
    t->closures_per_worker = Int(n["closures_per_worker"], "train.closures_per_worker", 1, JobLimits::kMaxClosuresPerWorker);
  }
  if (n["closures_per_rpc"]) t->closures_per_rpc = Int(n["closures_per_rpc"], "train.closures_per_rpc", 1, JobLimits::kMaxClosuresPerRpc);
  if (YAML::Node s = n["max_staleness"]) {
    t->max_staleness = Int(s, "train.max_staleness", 0, JobLimits::kMaxStaleness);
  }
  if (YAML::Node l = n["staleness_lr"]) {
    const std::string v = Str(l, "train.staleness_lr");
    if (v == "none") t->staleness_lr = TrainSpec::StalenessLr::kNone;
    else if (v == "inverse") t->staleness_lr = TrainSpec::StalenessLr::kInverse;
    else Fail(l, absl::StrCat("unknown train.staleness_lr '", v, "' (expected none or inverse)"));
  }
}

// The data must provide what the model's inputs need.
void CheckInputs(const YAML::Node& root, const JobSpec& spec) {
  // The model sees transformed values: train and eval must transform alike.
  const DataSourceSpec& train = spec.data.train;
  const DataSourceSpec& eval = spec.data.eval;
  if (train.format != "idx" && eval.format != "idx" &&
      train.dense_transforms.size() == eval.dense_transforms.size()) {
    for (size_t i = 0; i < train.dense_transforms.size(); ++i) {
      if (train.dense_transforms[i] != eval.dense_transforms[i]) {
        Fail(root["data"]["eval"]["dense_columns"][i],
             absl::StrCat("data.eval.dense_columns[", i, "] ('", eval.dense_columns[i],
                          "') has another transform than data.train.dense_columns[", i, "] ('",
                          train.dense_columns[i], "'): the model would see other inputs"));
      }
    }
  }
  for (const DataSourceSpec* d : {&spec.data.train, &spec.data.eval}) {
    const YAML::Node at = root["data"];
    if (d->format == "idx") {
      if (!spec.model.categorical.empty()) {
        Fail(at, "idx data has no categorical columns, but model.inputs.categorical is set");
      }
    } else if (d->format == "csv" || d->format == "tfrecord") {
      if (d->stream.enabled) CheckStreaming(at, spec);
      if (static_cast<int64_t>(d->dense_columns.size()) != spec.model.dense_inputs) {
        Fail(at, absl::StrCat("model.inputs.dense is ", spec.model.dense_inputs, " but the csv data names ",
                              d->dense_columns.size(), " dense_columns"));
      }
      for (const CategoricalFeatureSpec& f : spec.model.categorical) {
        const bool bucketized = f.bucket_width > 0 || !f.boundaries.empty();
        if (!f.cross.empty()) {
          // A cross: every crossed column declared; bucketization needs a
          // numeric one to act on.
          bool numeric = false;
          for (const std::string& name : f.cross) {
            const ColumnSpec* col = nullptr;
            for (const ColumnSpec& c : d->columns) {
              if (c.name == name) col = &c;
            }
            if (col == nullptr) {
              Fail(at, absl::StrCat("feature '", f.name, "' crosses column '", name,
                                    "', which the csv data does not declare"));
            }
            numeric = numeric || col->type != ColumnSpec::Type::kString;
          }
          if (bucketized && !numeric) {
            Fail(at, absl::StrCat("feature '", f.name,
                                  "' is bucketized but crosses no int or float column"));
          }
          continue;
        }
        bool found = false;
        for (const ColumnSpec& c : d->columns) {
          if (c.name != f.column) continue;
          found = true;
          if (!f.separator.empty() && c.type != ColumnSpec::Type::kString) {
            Fail(at, absl::StrCat("feature '", f.name, "' has a separator but column '", c.name,
                                  "' is not a string"));
          }
          if (bucketized && c.type == ColumnSpec::Type::kString) {
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

void ParseSummaries(const YAML::Node& n, SummarySpec* s) {
  CheckKeys(n, "summaries", {"logdir", "every_steps"});
  s->logdir = Str(Required(n, "logdir", "summaries"), "summaries.logdir");
  if (s->logdir.empty()) Fail(n["logdir"], "summaries.logdir must not be empty");
  if (n["every_steps"]) {
    s->every_steps = Int(n["every_steps"], "summaries.every_steps", 0, JobLimits::kMaxExamples);
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
             "variable_partitioner", "data", "train", "checkpoint", "summaries", "eval",
             "fault_tolerance"});
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
  if (spec.train.staleness_lr == TrainSpec::StalenessLr::kInverse) {
    // The PS scales the rate of each push (ps/core/optimizer.h).
    if (spec.optimizer.type() == "ftrl") {
      Fail(root["train"]["staleness_lr"],
           "train.staleness_lr: inverse needs optimizer sgd, momentum, adagrad or adam (ftrl "
           "takes only its constant rate)");
    }
    spec.optimizer.set_inverse_staleness_lr(true);
    spec.base_optimizer.set_inverse_staleness_lr(true);
  }
  if (root["checkpoint"]) ParseCheckpoint(root["checkpoint"], &spec.checkpoint);
  if (root["summaries"]) ParseSummaries(root["summaries"], &spec.summaries);
  if (root["eval"]) job_spec_internal::ParseEval(root["eval"], &spec);
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
  // DLRM: the bottom layers' outputs and the interaction's (the top's input).
  std::vector<int64_t> widths;
  for (const LayerSpec& layer : spec.model.bottom) widths.push_back(layer.units);
  if (!spec.model.bottom.empty()) widths.push_back(spec.model.layers[0].input.size());
  for (int64_t width : widths) {
    if (width > JobLimits::kMaxActivationElements ||
        batch * width > JobLimits::kMaxActivationElements) {
      Fail(root["model"]["bottom"],
           absl::StrCat("model.bottom: batch ", batch, " x width ", width, " is ", batch * width,
                        " activations, over the limit of ", JobLimits::kMaxActivationElements,
                        " (1 GiB of float32)"));
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

absl::Status CheckLabelled(const JobSpec& spec) {
  const auto refuse = [](const char* part) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.", part, " has no labels (`labels:` for idx, `label:` for csv): a job trains and "
        "evaluates on labelled data; unlabelled rows are for psctl predict --data"));
  };
  if (!spec.data.train.labelled) return refuse("train");
  if (!spec.data.eval.labelled && spec.eval.mode != EvalSpec::Mode::kNone) return refuse("eval");
  return absl::OkStatus();
}

std::vector<std::string> DataFiles(const JobSpec& spec) {
  std::vector<std::string> files;
  for (const DataSourceSpec* d : {&spec.data.train, &spec.data.eval}) {
    if (d->format == "idx") {
      files.push_back(d->images);
      if (d->labelled) files.push_back(d->labels);
    } else if (d->format == "csv" || d->format == "tfrecord") {
      if (d->paths.empty()) files.push_back(d->path);
      for (const std::string& p : d->paths) files.push_back(p);
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
      if (d->labelled) files.push_back({prefix + "labels", d->labels});
    } else if (d->format == "csv" || d->format == "tfrecord") {
      if (d->paths.empty()) files.push_back({prefix + "path", d->path});
      for (size_t i = 0; i < d->paths.size(); ++i) {
        files.push_back({absl::StrCat(prefix, "path[", i, "]"), d->paths[i]});
      }
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
