// checkpoint_predict: pscluster's own predictions from a checkpoint, for
// tests that compare an exported model against them (onnx_export_test.sh,
// onnx_export_ctr_test.sh).
//
//   checkpoint_predict CHECKPOINT_DIR ROWS OUT_PREFIX
//
// Restores the newest checkpoint that restores into in-process stores
// (client/checkpoint_params.h), reads the first ROWS examples of the job's
// eval data with worker/core's own reader, looks their categorical ids up
// as a worker's eval step does (deduplicated, through the ParamRouter and a
// Pull, so a hash key the checkpoint lacks is created from the initializer,
// as a PS creates it) and runs worker/core's Model forward pass in inference
// form (Model::Predict, the eval path) on the CPU backend. Writes, row-major:
//   OUT_PREFIX.inputs       float32 [ROWS, dense inputs]
//   OUT_PREFIX.ids.<f>      int64 [ROWS, width_f] for categorical feature f
//                           (spec order): each example's ids as fed to the
//                           lookups, as the int64 of the same bits, padded
//                           with -1 — the graph's "ids/<feature>" input
//   OUT_PREFIX.logits       float32 [ROWS, outputs]
//   OUT_PREFIX.predictions  float32: softmax of the logits for
//                           softmax_cross_entropy, sigmoid for
//                           sigmoid_cross_entropy, the logits otherwise
//   OUT_PREFIX.json         {"rows", "inputs", "outputs", "created_rows"
//                           (hash rows the lookups created: keys the
//                           checkpoint did not hold), "features": [{"input",
//                           "width", "ids"}]}
// and prints "rows R inputs I outputs O created_rows C". Exit 1 on any error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/checkpoint_params.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/dataset.h"
#include "worker/core/model.h"
#include "worker/core/param_router.h"

namespace pscluster {
namespace {

template <typename T>
bool WriteValues(const std::string& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(T)));
  return static_cast<bool>(out.flush());
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "checkpoint_predict: %s\n", what.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  if (argc != 4) return Fail("usage: checkpoint_predict CHECKPOINT_DIR ROWS OUT_PREFIX");
  const std::string prefix = argv[3];
  const int64_t want = std::atoll(argv[2]);
  absl::StatusOr<std::unique_ptr<RestoredCheckpoint>> ckpt = RestoredCheckpoint::Open(argv[1]);
  if (!ckpt.ok()) return Fail(std::string(ckpt.status().message()));
  const JobSpec& spec = (*ckpt)->spec();
  const ModelSpec& m = spec.model;
  absl::StatusOr<std::vector<Tensor>> params = (*ckpt)->ReadDense();
  if (!params.ok()) return Fail(std::string(params.status().message()));
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(spec);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  absl::StatusOr<Dataset> data = LoadDataset(spec.data.eval, m);
  if (!data.ok()) return Fail(std::string(data.status().message()));

  ModelBatch batch;
  batch.size = std::min(want, data->count);
  const int64_t n = batch.size;
  batch.x.assign(data->x.begin(), data->x.begin() + n * data->features);
  batch.y.assign(data->y.begin(), data->y.begin() + n);
  // Per feature, as Trainer::Gather: the batch's ids, deduplicated.
  const size_t features = m.categorical.size();
  batch.features.resize(features);
  std::vector<std::vector<uint64_t>> unique_ids(features);
  nlohmann::json report = {{"rows", n}, {"inputs", data->features}};
  report["features"] = nlohmann::json::array();
  for (size_t f = 0; f < features; ++f) {
    const CategoricalColumn& column = data->categorical[f];
    FeatureRows& rows = batch.features[f];
    std::vector<uint64_t> ids;
    rows.offsets.assign(1, 0);
    int64_t width = 1;
    for (int64_t e = 0; e < n; ++e) {
      ids.insert(ids.end(), column.ids.begin() + column.offsets[e],
                 column.ids.begin() + column.offsets[e + 1]);
      rows.offsets.push_back(static_cast<int64_t>(ids.size()));
      width = std::max(width, column.offsets[e + 1] - column.offsets[e]);
    }
    DedupeIds(ids, &unique_ids[f], &rows.index);
    std::vector<int64_t> padded(n * width, -1);
    for (int64_t e = 0; e < n; ++e) {
      for (int64_t k = rows.offsets[e]; k < rows.offsets[e + 1]; ++k) {
        padded[e * width + (k - rows.offsets[e])] = static_cast<int64_t>(ids[k]);
      }
    }
    const std::string path = prefix + ".ids." + std::to_string(f);
    if (!WriteValues(path, padded)) return Fail("cannot write " + path);
    report["features"].push_back(
        {{"input", "ids/" + m.categorical[f].name}, {"width", width}, {"ids", ids.size()}});
  }
  std::vector<Tensor> rows;
  int64_t created = 0;
  if (features > 0) {
    if (absl::Status s = (*ckpt)->Lookup(unique_ids, &rows, &created); !s.ok()) {
      return Fail(std::string(s.message()));
    }
  }

  std::unique_ptr<Backend> backend = CreateCpuBackend();
  ModelScratch scratch;
  std::vector<float> logits;
  (*model)->Predict(backend.get(), *params, batch, rows, &scratch, &logits);

  const int64_t width = static_cast<int64_t>(logits.size()) / std::max<int64_t>(n, 1);
  std::vector<float> predictions(logits.size());
  for (int64_t e = 0; e < n; ++e) {
    const float* z = logits.data() + e * width;
    float* p = predictions.data() + e * width;
    if (m.loss == "softmax_cross_entropy") {
      const double top = *std::max_element(z, z + width);
      double sum = 0;
      for (int64_t j = 0; j < width; ++j) sum += std::exp(z[j] - top);
      for (int64_t j = 0; j < width; ++j) p[j] = static_cast<float>(std::exp(z[j] - top) / sum);
    } else if (m.loss == "sigmoid_cross_entropy") {
      for (int64_t j = 0; j < width; ++j) p[j] = static_cast<float>(1.0 / (1.0 + std::exp(-z[j])));
    } else {
      std::copy(z, z + width, p);
    }
  }
  report["outputs"] = width;
  report["created_rows"] = created;
  if (!WriteValues(prefix + ".inputs", batch.x) || !WriteValues(prefix + ".logits", logits) ||
      !WriteValues(prefix + ".predictions", predictions)) {
    return Fail("cannot write " + prefix + ".*");
  }
  {
    std::ofstream out(prefix + ".json", std::ios::trunc);
    out << report.dump() << "\n";
    if (!out.flush()) return Fail("cannot write " + prefix + ".json");
  }
  std::printf("rows %lld inputs %lld outputs %lld created_rows %lld\n", static_cast<long long>(n),
              static_cast<long long>(data->features), static_cast<long long>(width),
              static_cast<long long>(created));
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
