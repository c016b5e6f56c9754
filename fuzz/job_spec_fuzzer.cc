// Fuzz target for the job-YAML parser (common/job_spec.h: ParseJobSpec).
//
// Any text must give a JobSpec or INVALID_ARGUMENT "file:line:col: ..." —
// never a crash, an exception, a hang or a sanitizer report. A spec that
// parses must also hold what the rest of the system relies on:
//   - it keeps the text verbatim (workers re-parse it) and re-parses to the
//     same variables;
//   - every size is within JobLimits, the partitioner and every initializer
//     pass their own validation;
//   - its variables (common/model_variables.h) are plannable over 1 and 3 PS,
//     and a PS (ps/core VariableStore) accepts each variable's kind,
//     initializer and optimizer (probed with a one-element variable, so a
//     huge vocabulary allocates nothing).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/job_spec.h"
#include "common/model_variables.h"
#include "common/partitioner.h"
#include "fuzz/fuzz_check.h"
#include "protos/ps.pb.h"
#include "ps/core/variable_store.h"

namespace pscluster {
namespace {

void CheckWithin(int64_t value, int64_t min, int64_t max, const char* what) {
  FUZZ_CHECK(value >= min && value <= max,
             absl::StrCat(what, " = ", value, " is outside [", min, ", ", max, "]"));
}

void CheckLimits(const JobSpec& spec) {
  // With data.global_batch the per-replica batch is derived later, from the
  // replica count (ResolveReplicas); until then it is 0.
  if (spec.data.global_batch_given) {
    CheckWithin(spec.data.global_batch, 1, JobLimits::kMaxGlobalBatch, "global_batch");
  } else {
    CheckWithin(spec.data.per_replica_batch, 1, JobLimits::kMaxBatch, "per_replica_batch");
  }
  CheckWithin(spec.model.dense_inputs, 0, JobLimits::kMaxDenseInputs, "model.inputs.dense");
  CheckWithin(spec.train.epochs, 1, JobLimits::kMaxEpochs, "train.epochs");
  CheckWithin(spec.train.steps_per_closure, 1, JobLimits::kMaxStepsPerClosure,
              "train.steps_per_closure");
  CheckWithin(spec.train.closures_per_worker, 1, JobLimits::kMaxClosuresPerWorker,
              "train.closures_per_worker");
  CheckWithin(spec.train.closures_per_rpc, 1, JobLimits::kMaxClosuresPerRpc,
              "train.closures_per_rpc");
  CheckWithin(spec.fault_tolerance.max_attempts, 1, JobLimits::kMaxAttempts,
              "fault_tolerance.max_attempts");
  CheckWithin(spec.checkpoint.max_retries, 0, JobLimits::kMaxCheckpointRetries,
              "checkpoint.max_retries");
  for (const DataSourceSpec* d : {&spec.data.train, &spec.data.eval}) {
    CheckWithin(d->limit, 0, JobLimits::kMaxExamples, "data limit");
  }
  FUZZ_CHECK(ModelInputWidth(spec.model) > 0, "a model with no inputs was accepted");
  FUZZ_CHECK(!spec.model.layers.empty(), "a model with no layers was accepted");
  int64_t width = ModelInputWidth(spec.model);
  for (const LayerSpec& layer : spec.model.layers) {
    if (layer.kind == LayerSpec::Kind::kDense) {
      CheckWithin(layer.units, 1, JobLimits::kMaxUnits, "dense units");
      width = layer.units;
    }
    FUZZ_CHECK(spec.data.per_replica_batch * width <= JobLimits::kMaxActivationElements,
               "activations over the limit were accepted");
  }
  for (const CategoricalFeatureSpec& f : spec.model.categorical) {
    FUZZ_CHECK(f.hashed != (f.vocab_size > 0),
               absl::StrCat("feature '", f.name, "' must have exactly one of vocab_size/hashed"));
    CheckWithin(f.vocab_size, 0, JobLimits::kMaxVocab, "vocab_size");
    CheckWithin(f.max_rows, 0, JobLimits::kMaxVocab, "max_rows");
    CheckWithin(f.embedding_dim, 1, JobLimits::kMaxEmbeddingDim, "embedding_dim");
  }
  FUZZ_CHECK(ValidatePartitioner(spec.partitioner).ok(), "an invalid partitioner was accepted");
}

// A PS must accept what the parser accepts: each variable's kind,
// initializer and optimizer, on a variable of one element (or row).
void CheckPsAccepts(const std::vector<VariableSpecProto>& vars) {
  VariableStore::Options options;
  options.max_variable_elements = 1 << 10;
  VariableStore store(options);
  CreateVariablesRequest request;
  for (size_t i = 0; i < vars.size(); ++i) {
    VariableSpecProto* probe = request.add_variables();
    *probe = vars[i];
    probe->set_name(absl::StrCat("probe_", i));
    probe->clear_shape();
    probe->clear_full_shape();
    probe->set_row_offset(0);
    probe->add_shape(1);
    if (probe->kind() == DENSE) probe->add_shape(1);  // rank 2, like a kernel
    if (probe->max_rows() > 0) probe->set_max_rows(1);
    FUZZ_CHECK(ValidateInitializer(vars[i].initializer()).ok(),
               absl::StrCat("variable ", vars[i].name(), " has an invalid initializer"));
  }
  CreateVariablesResponse response;
  absl::Status s = store.CreateVariables(request, &response);
  FUZZ_CHECK(s.ok(), absl::StrCat("the PS refuses the job's variables: ", s.ToString()));
}

std::vector<std::string> VariableNames(const JobSpec& spec) {
  std::vector<std::string> names;
  for (const VariableSpecProto& v : ModelVariables(spec)) names.push_back(v.name());
  return names;
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;  // NOLINT(build/namespaces): a fuzz entry point
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "fuzz.yaml");
  if (!spec.ok()) {
    FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument,
               spec.status().ToString());
    FUZZ_CHECK(spec.status().message().rfind("fuzz.yaml", 0) == 0,
               absl::StrCat("error does not name the file: ", spec.status().ToString()));
    return 0;
  }
  FUZZ_CHECK(spec->yaml == text, "the spec does not keep its YAML verbatim");
  CheckLimits(*spec);

  const std::vector<VariableSpecProto> vars = ModelVariables(*spec);
  FUZZ_CHECK(!vars.empty(), "a parsed job has no variables");
  for (const VariableSpecProto& v : vars) {
    FUZZ_CHECK(!v.name().empty(), "a variable without a name");
    for (int64_t d : v.shape()) {
      FUZZ_CHECK(d >= 1, absl::StrCat("variable ", v.name(), " has a dimension ", d));
    }
  }
  for (int num_ps : {1, 3}) {
    absl::StatusOr<VariablePlan> plan = PlanVariables(vars, spec->partitioner, num_ps);
    FUZZ_CHECK(plan.ok(), absl::StrCat("a parsed job cannot be laid out over ", num_ps,
                                       " PS: ", plan.status().ToString()));
    FUZZ_CHECK(plan->placement.size() == vars.size(), "one placement per variable");
    FUZZ_CHECK(plan->per_ps.size() == static_cast<size_t>(num_ps), "one request per PS");
  }
  CheckPsAccepts(vars);

  // Workers re-parse the verbatim YAML: they must see the same job.
  absl::StatusOr<JobSpec> again = ParseJobSpec(spec->yaml, "again.yaml");
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(VariableNames(*again) == VariableNames(*spec), "re-parsing changed the variables");
  return 0;
}
