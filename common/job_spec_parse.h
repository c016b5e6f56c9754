// The job spec parser's shared pieces (common/job_spec.h is the API):
// errors thrown while walking the YAML (SpecError, turned into a Status by
// ParseJobSpec), typed field readers that name the field and its place, and
// the parsers of the spec's larger parts, each in its own file:
// job_spec_model.cc (model: inputs, layers, losses, initializers),
// job_spec_optimizer.cc (optimizer and learning-rate schedules) and
// job_spec_eval.cc (eval: inline | sidecar | none, keep_best),
// job_spec_stream.cc (data.*.stream: streaming input); the rest is
// in job_spec.cc. Internal to //common:job_spec.
#ifndef PSCLUSTER_COMMON_JOB_SPEC_PARSE_H_
#define PSCLUSTER_COMMON_JOB_SPEC_PARSE_H_

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace pscluster {
namespace job_spec_internal {

// Thrown inside the parser and turned into a Status at its boundary.
struct SpecError {
  YAML::Mark mark;
  std::string message;
};

[[noreturn]] void Fail(const YAML::Node& node, std::string message);
// "a mapping", "a list", "empty" or the quoted scalar.
std::string Describe(const YAML::Node& n);
void ExpectMap(const YAML::Node& node, const std::string& where);
// Rejects keys of `node` outside `allowed`, naming the ones that are valid.
void CheckKeys(const YAML::Node& node, const std::string& where,
               const std::vector<std::string>& allowed);

template <typename T>
T Scalar(const YAML::Node& node, const std::string& what, const char* type_name) {
  if (!node.IsScalar())
    Fail(node, absl::StrCat(what, " must be ", type_name, ", got ", Describe(node)));
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    Fail(node, absl::StrCat(what, " must be ", type_name, ", got ", Describe(node)));
  }
}

std::string Str(const YAML::Node& n, const std::string& what);
double Num(const YAML::Node& n, const std::string& what);
bool Bool(const YAML::Node& n, const std::string& what);
// An integer in [min_value, max_value]; the bounds (job_spec.h, JobLimits)
// keep every size of a job within what the cluster can hold and what int64
// arithmetic on it can represent.
int64_t Int(const YAML::Node& n, const std::string& what, int64_t min_value,
            int64_t max_value = std::numeric_limits<int64_t>::max());
float Positive(const YAML::Node& n, const std::string& what);
YAML::Node Required(const YAML::Node& parent, const std::string& key, const std::string& where);

// `model` (job_spec_model.cc).
void ParseModel(const YAML::Node& n, ModelSpec* m);
// `optimizer` (job_spec_optimizer.cc): o->learning_rate and o->schedule
// before scale_with_replicas, which is returned in *scale_with_replicas.
void ParseOptimizer(const YAML::Node& n, OptimizerProto* o, bool* scale_with_replicas);
// `eval` (job_spec_eval.cc): a mode scalar or {mode, keep_best}; checked
// against spec->checkpoint, so call it after the checkpoint is parsed.
void ParseEval(const YAML::Node& n, JobSpec* spec);
// `stream` of the csv or tfrecord source `n` at `where` (job_spec_stream.cc):
// d->stream from n["stream"] (all defaults when absent, for tfrecord), and
// the fields a stream cannot honour (limit, split) refused.
void ParseStream(const YAML::Node& n, const std::string& where, DataSourceSpec* d);
// A job with a streaming source: the strategies that can run it (`at`
// names the data for errors).
void CheckStreaming(const YAML::Node& at, const JobSpec& spec);

}  // namespace job_spec_internal
}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_JOB_SPEC_PARSE_H_
