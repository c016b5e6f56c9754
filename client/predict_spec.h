// What `psctl predict` runs and writes: the prediction spec it sends to the
// coordinator (the checkpoint's job spec, its data replaced by the rows to
// predict), and the CSV lines of the predictions.
//
// Free functions; thread-safe (they read files, and write only their
// outputs).
#ifndef PSCLUSTER_CLIENT_PREDICT_SPEC_H_
#define PSCLUSTER_CLIENT_PREDICT_SPEC_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/job_spec.h"

namespace pscluster {

// The job to predict with.
struct PredictSource {
  JobSpec spec;                // the job's, as written or as its job log records it
  std::string checkpoint_dir;  // absolute
};

// `argument` is a checkpoint directory (the spec comes from its job log,
// as `psctl export` reads it) or a JOB.yaml (its checkpoint.dir, relative
// to the working directory). NOT_FOUND naming `argument` when it does not
// exist, or for a directory without a job log, or a spec without
// checkpoint.dir; INVALID_ARGUMENT for a spec that does not parse.
absl::StatusOr<PredictSource> LoadPredictSource(const std::string& argument);

// The spec sent with the prediction: `source.spec` with data.train and
// data.eval both set to the data source in the YAML file `data_path` (one
// mapping with the keys of the job spec's data.eval, e.g. {format: idx,
// images: ..., labels: ...}; relative files are relative to the working
// directory), or to the job's own data.eval when `data_path` is empty;
// checkpoint.dir set to source.checkpoint_dir; summaries dropped. The
// returned spec's `yaml` is that text. NOT_FOUND for an unreadable
// `data_path`; INVALID_ARGUMENT naming `data_path` for a file that is not
// such a mapping or a source the spec refuses.
absl::StatusOr<JobSpec> PredictSpec(const PredictSource& source, const std::string& data_path);

// The CSV header for `outputs` outputs per row: "row,prediction" for one
// output (a binary model's probability, sigmoid of the logit, or a
// regression's value); "row,p0,...,p{n-1},class" for a softmax model
// (probabilities and the argmax); "row,y0,...,y{n-1}" for a regression
// with several outputs.
std::string PredictCsvHeader(const JobSpec& spec, int64_t outputs);

// Appends row `row`'s CSV line (with '\n') for its model outputs `logits`
// (`outputs` of them), as PredictCsvHeader lays them out. Floats are
// printed with 9 significant digits: they read back as the same float.
void AppendPredictCsvRow(const JobSpec& spec, int64_t row, const float* logits, int64_t outputs,
                         std::string* out);

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_PREDICT_SPEC_H_
