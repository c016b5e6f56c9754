#include "common/model_variables.h"

#include <xxhash.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor.h"

namespace pscluster {

std::vector<VariableSpecProto> ModelVariables(const JobSpec& spec) {
  std::vector<VariableSpecProto> vars;
  for (const CategoricalFeatureSpec& f : spec.model.categorical) {
    VariableSpecProto table;
    table.set_name("embedding/" + f.name);
    table.set_dtype(DT_FLOAT32);
    if (f.hashed) {
      table.set_kind(HASH_TABLE);
      table.add_shape(f.embedding_dim);
      table.set_max_rows(f.max_rows);
      table.set_eviction(f.eviction);
    } else {
      table.set_kind(DENSE);
      table.add_shape(f.vocab_size);
      table.add_shape(f.embedding_dim);
    }
    *table.mutable_initializer() = f.initializer;
    table.mutable_initializer()->set_seed(spec.seed);
    *table.mutable_optimizer() = spec.optimizer;
    vars.push_back(std::move(table));
  }
  auto add = [&](const std::string& name, std::vector<int64_t> shape,
                 const InitializerProto& init, const OptimizerProto& optimizer) {
    VariableSpecProto v;
    v.set_name(name);
    v.set_dtype(DT_FLOAT32);
    for (int64_t d : shape) v.add_shape(d);
    *v.mutable_initializer() = init;
    *v.mutable_optimizer() = optimizer;
    vars.push_back(std::move(v));
  };
  for (size_t i = 0; i < spec.model.bottom.size(); ++i) {
    const LayerSpec& layer = spec.model.bottom[i];
    const std::string prefix = absl::StrCat("bottom_", i);
    add(prefix + "/kernel", {layer.input.size(), layer.units}, spec.model.kernel_initializer,
        spec.optimizer);
    add(prefix + "/bias", {layer.units}, spec.model.bias_initializer, spec.optimizer);
  }
  int dense_index = 0, conv_index = 0, norm_index = 0, cross_index = 0;
  for (const LayerSpec& layer : spec.model.layers) {
    if (layer.kind == LayerSpec::Kind::kDense) {
      const std::string prefix = absl::StrCat("dense_", dense_index++);
      add(prefix + "/kernel", {layer.input.size(), layer.units}, spec.model.kernel_initializer,
          spec.optimizer);
      add(prefix + "/bias", {layer.units}, spec.model.bias_initializer, spec.optimizer);
    } else if (layer.kind == LayerSpec::Kind::kConv2d) {
      const std::string prefix = absl::StrCat("conv2d_", conv_index++);
      add(prefix + "/kernel", {layer.window_h, layer.window_w, layer.input.channels, layer.units},
          spec.model.kernel_initializer, spec.optimizer);
      add(prefix + "/bias", {layer.units}, spec.model.bias_initializer, spec.optimizer);
    } else if (layer.kind == LayerSpec::Kind::kCross) {
      const std::string prefix = absl::StrCat("cross_", cross_index++);
      const int64_t d = layer.input.size();
      if (layer.rank > 0) {
        add(prefix + "/kernel_u", {d, layer.rank}, spec.model.kernel_initializer, spec.optimizer);
        add(prefix + "/kernel_v", {layer.rank, d}, spec.model.kernel_initializer, spec.optimizer);
      } else {
        add(prefix + "/kernel", {d, d}, spec.model.kernel_initializer, spec.optimizer);
      }
      add(prefix + "/bias", {d}, spec.model.bias_initializer, spec.optimizer);
    } else if (layer.kind == LayerSpec::Kind::kBatchNorm) {
      const std::string prefix = absl::StrCat("batch_norm_", norm_index++);
      const int64_t c = layer.input.channels;
      InitializerProto ones, zeros;
      ones.set_type("ones");
      zeros.set_type("zeros");
      OptimizerProto average;
      average.set_type("moving_average");
      average.set_learning_rate(1.0f);
      average.set_momentum(layer.momentum);
      add(prefix + "/gamma", {c}, ones, spec.optimizer);
      add(prefix + "/beta", {c}, zeros, spec.optimizer);
      add(prefix + "/moving_mean", {c}, zeros, average);
      add(prefix + "/moving_variance", {c}, ones, average);
    }
  }
  if (spec.model.wide_dense) {
    InitializerProto zeros;
    zeros.set_type("zeros");
    add("wide/dense_kernel", {spec.model.dense_inputs, 1}, zeros, spec.optimizer);
  }
  return vars;
}

int64_t ModelInputWidth(const ModelSpec& model) {
  if (!model.bottom.empty() && !model.layers.empty()) return model.layers[0].input.size();
  int64_t width = model.dense_inputs;
  for (const CategoricalFeatureSpec& f : model.categorical) {
    if (std::count(model.wide_categorical.begin(), model.wide_categorical.end(), f.name) == 0) {
      width += f.embedding_dim;
    }
  }
  return width;
}

bool IsRowAccessed(const VariableSpecProto& var) {
  return var.kind() == HASH_TABLE || var.name().rfind("embedding/", 0) == 0;
}

int HashTableShard(uint64_t id, int num_shards) {
  return static_cast<int>(XXH3_64bits(&id, sizeof(id)) % static_cast<uint64_t>(num_shards));
}

absl::StatusOr<VariablePlan> PlanVariables(const std::vector<VariableSpecProto>& vars,
                                           const PartitionerSpec& partitioner, int num_ps) {
  VariablePlan plan;
  plan.per_ps.resize(num_ps);
  RoundRobinPlacer placer(num_ps);
  for (const VariableSpecProto& var : vars) {
    VariablePlacementProto p;
    p.set_name(var.name());
    if (var.kind() == HASH_TABLE) {
      for (int i = 0; i < num_ps; ++i) {
        ShardProto* shard = p.add_shards();
        shard->set_name(absl::StrCat(var.name(), "/part_", i));
        shard->set_ps_index(i);
        VariableSpecProto concrete = var;
        concrete.set_name(shard->name());
        *plan.per_ps[i].add_variables() = std::move(concrete);
      }
      plan.placement.push_back(std::move(p));
      continue;
    }
    const Shape shape(var.shape().begin(), var.shape().end());
    ASSIGN_OR_RETURN(std::vector<Shard> shards,
                     placer.Place(var.name(), shape, sizeof(float), partitioner));
    const bool partitioned = !(shards.size() == 1 && shards[0].name == var.name());
    for (const Shard& s : shards) {
      VariableSpecProto concrete = var;
      concrete.set_name(s.name);
      if (partitioned) {
        concrete.set_shape(0, s.rows);
        concrete.mutable_full_shape()->Assign(shape.begin(), shape.end());
        concrete.set_row_offset(s.row_offset);
        ShardProto* shard = p.add_shards();
        shard->set_name(s.name);
        shard->set_row_offset(s.row_offset);
        shard->set_rows(s.rows);
        shard->set_ps_index(s.ps_task);
      } else {
        p.set_ps_index(s.ps_task);
      }
      *plan.per_ps[s.ps_task].add_variables() = std::move(concrete);
    }
    plan.placement.push_back(std::move(p));
  }
  return plan;
}

std::string DescribePlacement(const VariableSpecProto& var,
                              const VariablePlacementProto& placement) {
  if (var.kind() == HASH_TABLE) {
    return absl::StrCat("hash table: ", placement.shards_size(), " shards (one per PS), id -> shard by hash",
                        var.max_rows() > 0 ? absl::StrCat(", at most ", var.max_rows(), " rows per shard")
                                           : "");
  }
  if (placement.shards_size() == 0) return "not partitioned";
  return absl::StrCat(placement.shards_size(), " shards along axis 0");
}

}  // namespace pscluster
