// checkpoint_predict: pscluster's own predictions from a checkpoint, for
// tests that compare an exported model against them (onnx_export_test.sh).
//
//   checkpoint_predict CHECKPOINT_DIR ROWS OUT_PREFIX
//
// Loads the newest checkpoint that restores (client/checkpoint_params.h),
// reads the first ROWS examples of the job's eval data with worker/core's
// own reader, and runs worker/core's Model forward pass in inference form
// (Model::Predict, the eval path) on the CPU backend. Writes raw float32,
// row-major: OUT_PREFIX.inputs [ROWS, inputs], OUT_PREFIX.logits [ROWS,
// outputs] and OUT_PREFIX.predictions (softmax of the logits for
// softmax_cross_entropy, sigmoid for sigmoid_cross_entropy, the logits
// otherwise); prints "rows R inputs I outputs O". Exit 1 on any error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "client/checkpoint_params.h"
#include "worker/core/cpu_backend.h"
#include "worker/core/dataset.h"
#include "worker/core/model.h"

namespace pscluster {
namespace {

bool WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(v.data()),
            static_cast<std::streamsize>(v.size() * sizeof(float)));
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
  absl::StatusOr<CheckpointParams> ckpt = LoadCheckpointParams(argv[1]);
  if (!ckpt.ok()) return Fail(std::string(ckpt.status().message()));
  const ModelSpec& m = ckpt->spec.model;
  if (!m.categorical.empty()) return Fail("models with categorical inputs are not supported");
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(ckpt->spec);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  absl::StatusOr<Dataset> data = LoadDataset(ckpt->spec.data.eval, m);
  if (!data.ok()) return Fail(std::string(data.status().message()));

  ModelBatch batch;
  batch.size = std::min(want, data->count);
  batch.x.assign(data->x.begin(), data->x.begin() + batch.size * data->features);
  batch.y.assign(data->y.begin(), data->y.begin() + batch.size);
  std::unique_ptr<Backend> backend = CreateCpuBackend();
  ModelScratch scratch;
  std::vector<float> logits;
  (*model)->Predict(backend.get(), ckpt->params, batch, /*rows=*/{}, &scratch, &logits);

  const int64_t width = static_cast<int64_t>(logits.size()) / std::max<int64_t>(batch.size, 1);
  std::vector<float> predictions(logits.size());
  for (int64_t e = 0; e < batch.size; ++e) {
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
  if (!WriteFloats(prefix + ".inputs", batch.x) || !WriteFloats(prefix + ".logits", logits) ||
      !WriteFloats(prefix + ".predictions", predictions)) {
    return Fail("cannot write " + prefix + ".*");
  }
  std::printf("rows %lld inputs %lld outputs %lld\n", static_cast<long long>(batch.size),
              static_cast<long long>(data->features), static_cast<long long>(width));
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
