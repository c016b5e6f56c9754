#include "common/model_variables.h"

#include "absl/strings/str_cat.h"

namespace pscluster {

std::vector<VariableSpecProto> ModelVariables(const JobSpec& spec) {
  std::vector<VariableSpecProto> vars;
  int64_t fan_in = spec.model.dense_inputs;
  int dense_index = 0;
  for (const LayerSpec& layer : spec.model.layers) {
    if (layer.kind != LayerSpec::Kind::kDense) continue;
    const std::string prefix = absl::StrCat("dense_", dense_index++);
    VariableSpecProto kernel;
    kernel.set_name(prefix + "/kernel");
    kernel.set_dtype(DT_FLOAT32);
    kernel.add_shape(fan_in);
    kernel.add_shape(layer.units);
    *kernel.mutable_initializer() = spec.model.kernel_initializer;
    *kernel.mutable_optimizer() = spec.optimizer;
    VariableSpecProto bias;
    bias.set_name(prefix + "/bias");
    bias.set_dtype(DT_FLOAT32);
    bias.add_shape(layer.units);
    *bias.mutable_initializer() = spec.model.bias_initializer;
    *bias.mutable_optimizer() = spec.optimizer;
    vars.push_back(std::move(kernel));
    vars.push_back(std::move(bias));
    fan_in = layer.units;
  }
  return vars;
}

std::vector<int> RoundRobinPlacement(size_t num_variables, int num_ps) {
  std::vector<int> placement(num_variables);
  for (size_t i = 0; i < num_variables; ++i) placement[i] = static_cast<int>(i % num_ps);
  return placement;
}

}  // namespace pscluster
