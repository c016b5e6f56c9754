// fashion_mnist_coordinator: trains examples/fashion_mnist_mlp.yaml's model
// as a ClusterCoordinator program, on PS tasks and fashion_mnist_worker
// tasks already running, then evaluates it on the test set.
//
//   fashion_mnist_coordinator --ps=H:P,H:P --workers=H:P,H:P [--epochs=5]
//   fashion_mnist_coordinator --cluster=cluster.yaml ...
//   ... --checkpoint_root=ROOT [--checkpoint_dir=DIR --checkpoint_every_steps=N]
//       [--restore_dir=DIR] [--save_dir=DIR]
//
// Each epoch schedules one train_step closure per `steps_per_closure`
// batches (TF: coordinator.schedule(train_step, args)), fetches their
// results in order (printing "fetched K/N" as it goes) and joins; then
// `evaluate` closures over the test set. Prints the eval accuracy, the
// steps its closures made and each PS's applied and duplicate steps.
// With --checkpoint_root (the PS tasks' --checkpoint_root): periodic
// checkpoints that heal a PS that restarts, a checkpoint to start from
// (TF: strategy.restore) and one saved at the end (TF: strategy.save).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "api/pscluster/cluster_coordinator.h"
#include "examples/cpp/fashion_mnist_functions.h"

ABSL_FLAG(std::vector<std::string>, ps, {}, "the PS tasks, host:port,...");
ABSL_FLAG(std::vector<std::string>, workers, {}, "the fashion_mnist_worker tasks, host:port,...");
ABSL_FLAG(std::string, cluster, "", "a cluster file instead of --ps and --workers");
ABSL_FLAG(int64_t, epochs, 5, "passes over the training set");
ABSL_FLAG(int64_t, batch, 64, "examples per step");
ABSL_FLAG(int64_t, steps_per_closure, 20, "steps (batches) per train_step closure");
ABSL_FLAG(int64_t, hidden, 256, "units of the hidden layer");
ABSL_FLAG(double, learning_rate, 0.001, "Adam's learning rate");
ABSL_FLAG(uint64_t, seed, 42, "seeds the initializers and the shuffles");
ABSL_FLAG(std::string, partitioner, "none",
          "none | fixed:SHARDS | min_size:BYTES[:MAX_SHARDS] | max_size:BYTES[:MAX_SHARDS]");
ABSL_FLAG(std::string, checkpoint_root, "",
          "the PS tasks' --checkpoint_root as this program reaches it; the directories below "
          "are relative to it");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "periodic checkpoints (every --checkpoint_every_steps), restored into a PS that "
          "restarts");
ABSL_FLAG(int64_t, checkpoint_every_steps, 500, "steps between periodic checkpoints");
ABSL_FLAG(std::string, restore_dir, "",
          "start from the newest checkpoint in this directory (any PS count)");
ABSL_FLAG(std::string, save_dir, "", "save a checkpoint here after training");

namespace pscluster::examples {
namespace {

int Fail(const absl::Status& s) {
  std::cerr << "fashion_mnist_coordinator: " << s << "\n";
  return 1;
}

int Run() {
  ClusterCoordinator::Options options;
  options.ps_addresses = absl::GetFlag(FLAGS_ps);
  options.worker_addresses = absl::GetFlag(FLAGS_workers);
  options.cluster_file = absl::GetFlag(FLAGS_cluster);
  absl::StatusOr<PartitionerSpec> partitioner = ParsePartitioner(absl::GetFlag(FLAGS_partitioner));
  if (!partitioner.ok()) return Fail(partitioner.status());
  options.partitioner = *partitioner;
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (!options.checkpoint_dir.empty()) {
    options.checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  }
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> made =
      ClusterCoordinator::Create(std::move(options));
  if (!made.ok()) return Fail(made.status());
  ClusterCoordinator& coordinator = **made;

  // The YAML model's variables: glorot_uniform kernels, zero biases, Adam.
  const int64_t hidden = absl::GetFlag(FLAGS_hidden);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  OptimizerProto adam;
  adam.set_type("adam");
  adam.set_learning_rate(static_cast<float>(absl::GetFlag(FLAGS_learning_rate)));
  adam.set_beta1(0.9f);
  adam.set_beta2(0.999f);
  adam.set_epsilon(1e-7f);
  InitializerProto glorot;
  glorot.set_type("glorot_uniform");
  InitializerProto zeros;
  zeros.set_type("zeros");
  glorot.set_seed(seed);
  absl::Status s = coordinator.CreateVariable(kKernel0, {kPixels, hidden}, glorot, adam);
  glorot.set_seed(seed + 1);
  if (s.ok()) s = coordinator.CreateVariable(kBias0, {hidden}, zeros, adam);
  if (s.ok()) s = coordinator.CreateVariable(kKernel1, {hidden, kClasses}, glorot, adam);
  if (s.ok()) s = coordinator.CreateVariable(kBias1, {kClasses}, zeros, adam);
  if (!s.ok()) return Fail(s);
  if (const std::string dir = absl::GetFlag(FLAGS_restore_dir); !dir.empty()) {
    if (absl::Status r = coordinator.Restore(dir); !r.ok()) return Fail(r);
    std::printf("restored %s: step %lld\n", dir.c_str(),
                static_cast<long long>(coordinator.global_step()));
  }

  const int64_t batch = absl::GetFlag(FLAGS_batch);
  const int64_t per_closure = batch * absl::GetFlag(FLAGS_steps_per_closure);
  for (int64_t epoch = 0; epoch < absl::GetFlag(FLAGS_epochs); ++epoch) {
    std::vector<RemoteValue> values;
    for (int64_t begin = 0; begin < kTrainExamples; begin += per_closure) {
      const int64_t end = std::min(begin + per_closure, kTrainExamples);
      absl::StatusOr<RemoteValue> v = coordinator.Schedule(
          "train_step", absl::StrCat(epoch, " ", begin, " ", end, " ", batch, " ", seed));
      if (!v.ok()) return Fail(v.status());
      values.push_back(*v);
    }
    Totals train;
    for (size_t i = 0; i < values.size(); ++i) {
      absl::StatusOr<std::string> r = values[i].Fetch();
      if (!r.ok()) return Fail(r.status());
      absl::StatusOr<Totals> t = Totals::Decode(*r);
      if (!t.ok()) return Fail(t.status());
      train.Add(*t);
      std::printf("epoch %lld: fetched %zu/%zu\n", static_cast<long long>(epoch + 1), i + 1,
                  values.size());
      std::fflush(stdout);
    }
    if (absl::Status j = coordinator.Join(); !j.ok()) return Fail(j);
    std::printf("epoch %lld: train loss %.4f accuracy %.4f\n",
                static_cast<long long>(epoch + 1), train.loss_sum / train.examples,
                static_cast<double>(train.correct) / train.examples);
  }
  std::vector<RemoteValue> evals;
  for (int64_t begin = 0; begin < kTestExamples; begin += 2000) {
    absl::StatusOr<RemoteValue> v =
        coordinator.Schedule("evaluate", absl::StrCat(begin, " ", begin + 2000));
    if (!v.ok()) return Fail(v.status());
    evals.push_back(*v);
  }
  Totals eval;
  for (const RemoteValue& v : evals) {
    absl::StatusOr<std::string> r = v.Fetch();
    if (!r.ok()) return Fail(r.status());
    absl::StatusOr<Totals> t = Totals::Decode(*r);
    if (!t.ok()) return Fail(t.status());
    eval.Add(*t);
  }
  std::printf("eval loss %.4f accuracy %.4f\n", eval.loss_sum / eval.examples,
              static_cast<double>(eval.correct) / eval.examples);
  std::printf("steps %lld lost_steps %lld ps_recoveries %lld global_step %lld\n",
              static_cast<long long>(coordinator.steps()),
              static_cast<long long>(coordinator.lost_steps()),
              static_cast<long long>(coordinator.ps_recoveries()),
              static_cast<long long>(coordinator.global_step()));
  if (const std::string dir = absl::GetFlag(FLAGS_save_dir); !dir.empty()) {
    if (absl::Status sv = coordinator.Save(dir); !sv.ok()) return Fail(sv);
    std::printf("saved %s\n", dir.c_str());
  }
  absl::StatusOr<std::vector<StatsResponse>> stats = coordinator.PsStats();
  if (!stats.ok()) return Fail(stats.status());
  for (size_t p = 0; p < stats->size(); ++p) {
    std::printf("ps %zu: applied_steps %lld duplicate_steps %lld\n", p,
                static_cast<long long>((*stats)[p].applied_steps()),
                static_cast<long long>((*stats)[p].duplicate_steps()));
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace pscluster::examples

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains the Fashion-MNIST MLP as a ClusterCoordinator program.\n"
      "  fashion_mnist_coordinator --ps=H:P,... --workers=H:P,... [--epochs=N]");
  absl::ParseCommandLine(argc, argv);
  // The coordinator's logs (retries, workers lost) go to stderr; stdout
  // carries the results.
  spdlog::set_default_logger(spdlog::stderr_color_mt("fashion_mnist_coordinator"));
  return pscluster::examples::Run();
}
