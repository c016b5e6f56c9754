// The Fashion-MNIST MLP of examples/fashion_mnist_mlp.yaml, written as a
// ClusterCoordinator program's functions: what the example worker
// (fashion_mnist_worker.cc) registers and the coordinator
// (fashion_mnist_coordinator.cc) schedules. Both sides share the variable
// names and the argument and result formats here.
//
//   dense_0/kernel [784, hidden]  dense_0/bias [hidden]   (relu)
//   dense_1/kernel [hidden, 10]   dense_1/bias [10]       (softmax cross-entropy)
//
// train_step args "EPOCH BEGIN END BATCH SEED": trains on examples [BEGIN,
// END) of epoch EPOCH's shuffle (seeded SEED + EPOCH, so a retried closure
// reads the same examples), BATCH at a time, one pull and one push per
// batch. Result "LOSS_SUM EXAMPLES CORRECT".
// evaluate args "BEGIN END": the test set's examples [BEGIN, END). Result
// "LOSS_SUM EXAMPLES CORRECT".
#ifndef PSCLUSTER_EXAMPLES_CPP_FASHION_MNIST_FUNCTIONS_H_
#define PSCLUSTER_EXAMPLES_CPP_FASHION_MNIST_FUNCTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pscluster::examples {

inline constexpr int64_t kPixels = 784;
inline constexpr int64_t kClasses = 10;
inline constexpr int64_t kTrainExamples = 60000;
inline constexpr int64_t kTestExamples = 10000;
inline constexpr char kKernel0[] = "dense_0/kernel";
inline constexpr char kBias0[] = "dense_0/bias";
inline constexpr char kKernel1[] = "dense_1/kernel";
inline constexpr char kBias1[] = "dense_1/bias";

// What train_step and evaluate return.
struct Totals {
  double loss_sum = 0;
  int64_t examples = 0;
  int64_t correct = 0;

  std::string Encode() const { return absl::StrCat(loss_sum, " ", examples, " ", correct); }
  static absl::StatusOr<Totals> Decode(const std::string& bytes) {
    Totals t;
    const std::vector<std::string> f = absl::StrSplit(bytes, ' ');
    if (f.size() != 3 || !absl::SimpleAtod(f[0], &t.loss_sum) ||
        !absl::SimpleAtoi(f[1], &t.examples) || !absl::SimpleAtoi(f[2], &t.correct)) {
      return absl::InvalidArgumentError(absl::StrCat("not a result: '", bytes, "'"));
    }
    return t;
  }
  void Add(const Totals& o) {
    loss_sum += o.loss_sum;
    examples += o.examples;
    correct += o.correct;
  }
};

}  // namespace pscluster::examples

#endif  // PSCLUSTER_EXAMPLES_CPP_FASHION_MNIST_FUNCTIONS_H_
