// The job spec: what a user writes in a job YAML, parsed and validated.
//
// ParseJobSpec reports every problem as "file:line:column: what is wrong", so
// a user can find it in the YAML. The same spec runs in one process
// (strategy: one_device) or on a cluster (strategy: parameter_server).
#ifndef PSCLUSTER_COMMON_JOB_SPEC_H_
#define PSCLUSTER_COMMON_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "protos/ps.pb.h"

namespace pscluster {

enum class Strategy { kParameterServer, kOneDevice };
enum class DevicePreference { kAuto, kCpu, kCuda };
enum class Activation { kNone, kRelu };

struct LayerSpec {
  enum class Kind { kDense, kRelu };
  Kind kind = Kind::kDense;
  int64_t units = 0;                        // kDense only
  Activation activation = Activation::kNone;  // kDense only
};

struct ModelSpec {
  int64_t dense_inputs = 0;
  std::vector<LayerSpec> layers;
  std::string loss = "softmax_cross_entropy";
  InitializerProto kernel_initializer;  // default glorot_uniform
  InitializerProto bias_initializer;    // default zeros
};

struct DataSourceSpec {
  std::string format = "idx";
  std::string images;
  std::string labels;
  int64_t limit = 0;  // use only the first `limit` examples; 0 = all
};

struct DataSpec {
  DataSourceSpec train;
  DataSourceSpec eval;
  int64_t per_replica_batch = 64;
  bool shuffle = true;
};

struct TrainSpec {
  int64_t epochs = 1;
  int64_t steps_per_closure = 20;
  // Closures dispatched to one worker at a time (TF allows only one).
  int64_t closures_per_worker = 2;
};

struct JobSpec {
  std::string name;
  Strategy strategy = Strategy::kParameterServer;
  DevicePreference device = DevicePreference::kAuto;
  uint64_t seed = 1;
  ModelSpec model;
  OptimizerProto optimizer;
  DataSpec data;
  TrainSpec train;
  // The YAML this spec was parsed from; workers receive it verbatim.
  std::string yaml;
};

// Parses and validates a job spec. `filename` only names the source in error
// messages. Returns INVALID_ARGUMENT "filename:line:column: message" for
// malformed YAML, unknown keys, wrong types and out-of-range values.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const std::string& filename);

// Reads `path` and parses it. NOT_FOUND if the file cannot be read.
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);

// "parameter_server", "one_device", ...
const char* StrategyName(Strategy s);
const char* DeviceName(DevicePreference d);

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_JOB_SPEC_H_
