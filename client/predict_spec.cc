#include "client/predict_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/checkpoint_verify.h"

namespace pscluster {
namespace {

bool Softmax(const JobSpec& spec, int64_t outputs) {
  return outputs > 1 && spec.model.loss == "softmax_cross_entropy";
}

bool Sigmoid(const JobSpec& spec, int64_t outputs) {
  return outputs == 1 && spec.model.loss == "sigmoid_cross_entropy";
}

void AppendFloat(double v, std::string* out) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  out->append(buf);
}

}  // namespace

absl::StatusOr<PredictSource> LoadPredictSource(const std::string& argument) {
  std::error_code ec;
  const std::filesystem::path path(argument);
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint directory or job spec ", argument));
  }
  PredictSource source;
  if (std::filesystem::is_directory(path, ec)) {
    std::string job_id;
    absl::StatusOr<JobSpec> spec = CheckpointJobSpec(argument, "", &job_id);
    if (!spec.ok()) {
      return absl::Status(spec.status().code(),
                          absl::StrCat(argument, ": ", spec.status().message()));
    }
    source.spec = *std::move(spec);
    source.checkpoint_dir = std::filesystem::absolute(path, ec).lexically_normal().string();
  } else {
    absl::StatusOr<JobSpec> spec = LoadJobSpec(argument);
    if (!spec.ok()) return spec.status();
    if (spec->checkpoint.dir.empty()) {
      return absl::NotFoundError(
          absl::StrCat(argument, " has no checkpoint.dir: give the checkpoint directory instead"));
    }
    source.checkpoint_dir =
        std::filesystem::absolute(spec->checkpoint.dir, ec).lexically_normal().string();
    source.spec = *std::move(spec);
  }
  // Without a trailing slash: the coordinator confines it to its parent.
  while (source.checkpoint_dir.size() > 1 && source.checkpoint_dir.back() == '/') {
    source.checkpoint_dir.pop_back();
  }
  if (!std::filesystem::is_directory(source.checkpoint_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint directory ", source.checkpoint_dir));
  }
  return source;
}

absl::StatusOr<JobSpec> PredictSpec(const PredictSource& source, const std::string& data_path) {
  YAML::Node root;
  YAML::Node data_source;
  try {
    root = YAML::Load(source.spec.yaml);
    if (data_path.empty()) {
      data_source = YAML::Clone(root["data"]["eval"]);
    } else {
      std::ifstream in(data_path);
      if (!in) return absl::NotFoundError(absl::StrCat("cannot read --data ", data_path));
      std::stringstream text;
      text << in.rdbuf();
      data_source = YAML::Load(text.str());
      if (!data_source.IsMap()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--data ", data_path,
                         " must hold one data source mapping, as the job "
                         "spec's data.eval (e.g. {format: "
                         "idx, images: FILE, labels: FILE})"));
      }
    }
    root["data"]["train"] = data_source;
    root["data"]["eval"] = YAML::Clone(data_source);
    root["checkpoint"]["dir"] = source.checkpoint_dir;
    root.remove("summaries");
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        data_path.empty() ? std::string("the job spec") : "--data " + data_path, ": ", e.what()));
  }
  YAML::Emitter out;
  out << root;
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(out.c_str(), data_path.empty() ? "prediction spec"
                                                  : "prediction spec (--data " + data_path + ")");
  if (!spec.ok()) return spec.status();
  if (spec->data.eval.stream.enabled) {
    // Prediction answers row by row of a data set in memory (PREDICT
    // closures name rows, not file ranges).
    return absl::InvalidArgumentError(absl::StrCat(
        data_path.empty() ? std::string("the job spec's data.eval") : "--data " + data_path,
        " is a streaming source (", spec->data.eval.format,
        " with stream), which psctl predict cannot read: give --data a csv source without "
        "stream"));
  }
  return spec;
}

std::string PredictCsvHeader(const JobSpec& spec, int64_t outputs) {
  if (outputs == 1) return "row,prediction\n";
  std::string h = "row";
  const char* prefix = Softmax(spec, outputs) ? ",p" : ",y";
  for (int64_t k = 0; k < outputs; ++k) absl::StrAppend(&h, prefix, k);
  if (Softmax(spec, outputs)) h += ",class";
  return h + "\n";
}

void AppendPredictCsvRow(const JobSpec& spec, int64_t row, const float* logits, int64_t outputs,
                         std::string* out) {
  absl::StrAppend(out, row);
  if (Sigmoid(spec, outputs)) {
    out->push_back(',');
    AppendFloat(1.0 / (1.0 + std::exp(-static_cast<double>(logits[0]))), out);
  } else if (Softmax(spec, outputs)) {
    const float* best = std::max_element(logits, logits + outputs);
    double sum = 0;
    for (int64_t k = 0; k < outputs; ++k) sum += std::exp(static_cast<double>(logits[k] - *best));
    for (int64_t k = 0; k < outputs; ++k) {
      out->push_back(',');
      AppendFloat(static_cast<float>(std::exp(static_cast<double>(logits[k] - *best)) / sum), out);
    }
    absl::StrAppend(out, ",", best - logits);
  } else {
    for (int64_t k = 0; k < outputs; ++k) {
      out->push_back(',');
      AppendFloat(logits[k], out);
    }
  }
  out->push_back('\n');
}

}  // namespace pscluster
