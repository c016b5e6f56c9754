// fashion_mnist_worker: a worker binary with the Fashion-MNIST MLP's
// functions (fashion_mnist_functions.h), for fashion_mnist_coordinator.
//
//   fashion_mnist_worker --address=127.0.0.1:0 [--fashion_mnist_dir=DIR]
//
// Takes worker_server's flags too (--cluster/--task_index or TF_CONFIG, ...).
// Each worker reads the data files itself, once, at its first closure. The
// math runs on the worker's CPU backend (OpenBLAS), as YAML jobs' does.
#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"
#include "api/pscluster/function_worker.h"
#include "common/idx_reader.h"
#include "examples/cpp/fashion_mnist_functions.h"
#include "worker/core/backend.h"
#include "worker/core/cpu_backend.h"

ABSL_FLAG(std::string, fashion_mnist_dir, "/usr/share/datasets/fashion-mnist",
          "the directory of the four Fashion-MNIST idx files");

namespace pscluster::examples {
namespace {

struct Split {
  std::vector<float> x;  // [n, 784], in [0, 1]
  std::vector<int32_t> y;
  int64_t n = 0;
};

absl::StatusOr<Split> Load(const std::string& images, const std::string& labels) {
  const std::string dir = absl::GetFlag(FLAGS_fashion_mnist_dir);
  absl::StatusOr<IdxImages> im = ReadIdxImages(dir + "/" + images, 0);
  if (!im.ok()) return im.status();
  absl::StatusOr<std::vector<uint8_t>> lb = ReadIdxLabels(dir + "/" + labels, 0);
  if (!lb.ok()) return lb.status();
  if (im->rows * im->cols != kPixels || static_cast<int64_t>(lb->size()) != im->count) {
    return absl::InvalidArgumentError("the Fashion-MNIST files do not match 784-pixel images");
  }
  Split s;
  s.n = im->count;
  s.x.resize(im->pixels.size());
  for (size_t i = 0; i < s.x.size(); ++i) s.x[i] = im->pixels[i] / 255.0f;
  s.y.assign(lb->begin(), lb->end());
  return s;
}

// The data, read once by the first closure that needs it.
class Data {
 public:
  const absl::StatusOr<Split>& train() {
    absl::call_once(train_once_, [this] {
      train_ = Load("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz");
    });
    return train_;
  }
  const absl::StatusOr<Split>& test() {
    absl::call_once(test_once_, [this] {
      test_ = Load("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
    });
    return test_;
  }
  // Epoch `epoch`'s order of the training set (the same on every worker).
  std::shared_ptr<const std::vector<int64_t>> Order(int64_t epoch, uint64_t seed, int64_t n) {
    absl::MutexLock lock(&mu_);
    auto& order = orders_[{epoch, seed}];
    if (order == nullptr) {
      auto o = std::make_shared<std::vector<int64_t>>(n);
      std::iota(o->begin(), o->end(), 0);
      std::shuffle(o->begin(), o->end(), std::mt19937_64(seed + epoch));
      order = std::move(o);
      if (orders_.size() > 4) orders_.erase(orders_.begin());
    }
    return order;
  }

 private:
  absl::once_flag train_once_, test_once_;
  absl::StatusOr<Split> train_, test_;
  absl::Mutex mu_;
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<const std::vector<int64_t>>> orders_
      ABSL_GUARDED_BY(mu_);
};

Data& TheData() {
  static Data* data = new Data();
  return *data;
}

// One forward (and, with `train`, backward) pass of the MLP over `n`
// examples; grads [4] as the variables.
void Pass(Backend* b, const std::vector<Tensor>& v, const float* x, const int32_t* y, int64_t n,
          std::vector<Tensor>* grads, Totals* totals) {
  const int64_t hidden = v[1].num_elements();
  std::vector<float> h(n * hidden), logits(n * kClasses), dlogits(n * kClasses);
  b->Gemm(false, false, n, hidden, kPixels, 1, x, v[0].data(), 0, h.data());
  b->AddBias(n, hidden, v[1].data(), h.data());
  b->Relu(n * hidden, h.data());
  b->Gemm(false, false, n, kClasses, hidden, 1, h.data(), v[2].data(), 0, logits.data());
  b->AddBias(n, kClasses, v[3].data(), logits.data());
  double loss = 0;
  int64_t correct = 0;
  b->SoftmaxCrossEntropy(n, kClasses, logits.data(), y, grads ? dlogits.data() : nullptr, &loss,
                         &correct);
  totals->loss_sum += loss;
  totals->examples += n;
  totals->correct += correct;
  if (grads == nullptr) return;
  grads->clear();
  for (const Tensor& t : v) grads->emplace_back(t.shape());
  b->Gemm(true, false, hidden, kClasses, n, 1, h.data(), dlogits.data(), 0, (*grads)[2].data());
  b->BiasGrad(n, kClasses, dlogits.data(), (*grads)[3].data());
  std::vector<float> dh(n * hidden);
  b->Gemm(false, true, n, hidden, kClasses, 1, dlogits.data(), v[2].data(), 0, dh.data());
  b->ReluGrad(n * hidden, h.data(), dh.data());
  b->Gemm(true, false, kPixels, hidden, n, 1, x, dh.data(), 0, (*grads)[0].data());
  b->BiasGrad(n, hidden, dh.data(), (*grads)[1].data());
}

Backend* ThreadBackend() {
  thread_local std::unique_ptr<Backend> backend = CreateCpuBackend();
  return backend.get();
}

const std::vector<std::string> kVariables = {kKernel0, kBias0, kKernel1, kBias1};

absl::StatusOr<std::string> TrainStep(FunctionContext& ctx, const std::string& args) {
  int64_t epoch = 0, begin = 0, end = 0, batch = 0;
  uint64_t seed = 0;
  const std::vector<std::string> f = absl::StrSplit(args, ' ');
  if (f.size() != 5 || !absl::SimpleAtoi(f[0], &epoch) || !absl::SimpleAtoi(f[1], &begin) ||
      !absl::SimpleAtoi(f[2], &end) || !absl::SimpleAtoi(f[3], &batch) ||
      !absl::SimpleAtoi(f[4], &seed) || batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("train_step takes 'EPOCH BEGIN END BATCH SEED', not '", args, "'"));
  }
  // Checked before the data is read (a bad split fails at once).
  if (begin < 0 || begin > end || end > kTrainExamples) {
    return absl::InvalidArgumentError(absl::StrCat("split [", begin, ", ", end,
                                                   ") is outside the ", kTrainExamples,
                                                   " training examples"));
  }
  const absl::StatusOr<Split>& data = TheData().train();
  if (!data.ok()) return data.status();
  if (end > data->n) {
    return absl::InvalidArgumentError(absl::StrCat("split [", begin, ", ", end,
                                                   ") is outside the ", data->n,
                                                   " training examples"));
  }
  std::shared_ptr<const std::vector<int64_t>> order = TheData().Order(epoch, seed, data->n);
  Totals totals;
  std::vector<float> x;
  std::vector<int32_t> y;
  std::vector<Tensor> grads;
  // One round trip per PS a step: each push reads back the values the next
  // step uses (PushAndPull); the last push reads nothing.
  absl::StatusOr<std::vector<Tensor>> v;
  if (begin < end) v = ctx.Pull(kVariables);
  for (int64_t b = begin; b < end; b += batch) {
    const int64_t n = std::min(batch, end - b);
    x.resize(n * kPixels);
    y.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t e = (*order)[b + i];
      std::copy_n(data->x.data() + e * kPixels, kPixels, x.data() + i * kPixels);
      y[i] = data->y[e];
    }
    if (!v.ok()) return v.status();
    Pass(ThreadBackend(), *v, x.data(), y.data(), n, &grads, &totals);
    std::vector<std::pair<std::string, Tensor>> push;
    for (size_t k = 0; k < kVariables.size(); ++k) push.emplace_back(kVariables[k], grads[k]);
    const bool last = b + batch >= end;
    absl::StatusOr<std::vector<Tensor>> next =
        ctx.PushAndPull(push, last ? std::vector<std::string>{} : kVariables);
    if (!next.ok()) return next.status();
    if (!last) v = std::move(next);
  }
  return totals.Encode();
}

absl::StatusOr<std::string> Evaluate(FunctionContext& ctx, const std::string& args) {
  int64_t begin = 0, end = 0;
  const std::vector<std::string> f = absl::StrSplit(args, ' ');
  if (f.size() != 2 || !absl::SimpleAtoi(f[0], &begin) || !absl::SimpleAtoi(f[1], &end)) {
    return absl::InvalidArgumentError(
        absl::StrCat("evaluate takes 'BEGIN END', not '", args, "'"));
  }
  const absl::StatusOr<Split>& data = TheData().test();
  if (!data.ok()) return data.status();
  if (begin < 0 || begin > end || end > data->n) {
    return absl::InvalidArgumentError(absl::StrCat("split [", begin, ", ", end,
                                                   ") is outside the ", data->n,
                                                   " test examples"));
  }
  absl::StatusOr<std::vector<Tensor>> v = ctx.Pull(kVariables);
  if (!v.ok()) return v.status();
  Totals totals;
  Pass(ThreadBackend(), *v, data->x.data() + begin * kPixels, data->y.data() + begin,
       end - begin, nullptr, &totals);
  return totals.Encode();
}

}  // namespace
}  // namespace pscluster::examples

int main(int argc, char** argv) {
  pscluster::FunctionRegistry functions;
  if (!functions.Register("train_step", pscluster::examples::TrainStep).ok() ||
      !functions.Register("evaluate", pscluster::examples::Evaluate).ok()) {
    return 1;
  }
  return pscluster::RunFunctionWorker(argc, argv, &functions, "fashion_mnist_worker");
}
