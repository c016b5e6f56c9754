// cluster_coordinator_errors: TF's error semantics of ClusterCoordinator
// against a real cluster (PS tasks + fashion_mnist_worker tasks), for
// cluster_coordinator_test.sh, with its variables partitioned (fixed:2).
// Prints "ok: ..." per check; exits 1 naming the first check that failed.
//
//   cluster_coordinator_errors --ps=H:P,H:P --workers=H:P,H:P
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/pscluster/cluster_coordinator.h"
#include "examples/cpp/fashion_mnist_functions.h"

ABSL_FLAG(std::vector<std::string>, ps, {}, "the PS tasks");
ABSL_FLAG(std::vector<std::string>, workers, {}, "the fashion_mnist_worker tasks");

namespace pscluster::examples {
namespace {

#define CHECK_THAT(cond, what)                                   \
  do {                                                           \
    if (!(cond)) {                                               \
      std::cerr << "FAIL: " << what << " (" #cond ")\n";         \
      return 1;                                                  \
    }                                                            \
  } while (0)

std::string Good(int64_t begin) { return absl::StrCat("0 ", begin, " ", begin + 64, " 64 1"); }

int Run() {
  ClusterCoordinator::Options options;
  options.ps_addresses = absl::GetFlag(FLAGS_ps);
  options.worker_addresses = absl::GetFlag(FLAGS_workers);
  options.retry_backoff = absl::Milliseconds(50);
  // Every variable in two shards, one per PS: the functions' pulls and
  // pushes go through the sharded path.
  options.partitioner = PartitionerSpec::Fixed(2);
  absl::StatusOr<std::unique_ptr<ClusterCoordinator>> made = ClusterCoordinator::Create(options);
  CHECK_THAT(made.ok(), made.status());
  ClusterCoordinator& c = **made;
  OptimizerProto sgd;
  sgd.set_type("sgd");
  sgd.set_learning_rate(0.01f);
  InitializerProto glorot;
  glorot.set_type("glorot_uniform");
  const int64_t hidden = 16;
  CHECK_THAT(c.CreateVariable(kKernel0, {kPixels, hidden}, glorot, sgd).ok(), "variables");
  CHECK_THAT(c.CreateVariable(kBias0, {hidden}, glorot, sgd).ok(), "variables");
  CHECK_THAT(c.CreateVariable(kKernel1, {hidden, kClasses}, glorot, sgd).ok(), "variables");
  CHECK_THAT(c.CreateVariable(kBias1, {kClasses}, glorot, sgd).ok(), "variables");

  // Join with nothing scheduled returns at once.
  absl::Time start = absl::Now();
  CHECK_THAT(c.Join().ok() && absl::Now() - start < absl::Seconds(1), "empty Join");
  std::printf("ok: Join with nothing scheduled returned OK in %s\n",
              absl::FormatDuration(absl::Now() - start).c_str());

  // An unknown function: its Fetch and the next Join fail, naming it; the
  // error is raised once.
  absl::StatusOr<RemoteValue> unknown = c.Schedule("no_such_function", "");
  CHECK_THAT(unknown.ok(), unknown.status());
  absl::StatusOr<std::string> fetched = unknown->Fetch();
  CHECK_THAT(absl::IsNotFound(fetched.status()) &&
                 absl::StrContains(fetched.status().message(), "no function 'no_such_function'"),
             fetched.status());
  absl::Status joined = c.Join();
  CHECK_THAT(absl::IsNotFound(joined), joined);
  CHECK_THAT(c.Join().ok(), "a second Join raises the error again");
  std::printf("ok: unknown function: %s\n", fetched.status().ToString().c_str());

  // Warm-up: both workers read the data.
  std::vector<RemoteValue> warm;
  for (int i = 0; i < 4; ++i) warm.push_back(*c.Schedule("train_step", Good(64 * i)));
  CHECK_THAT(c.Join().ok(), "warm-up");
  for (const RemoteValue& v : warm) CHECK_THAT(v.Fetch().ok(), v.Fetch().status());
  const int64_t steps_before = c.steps();
  CHECK_THAT(steps_before == 4, "4 warm-up steps, got " << steps_before);

  // A function that fails (a split outside the data): Fetch raises its
  // error with the worker's traceback; closures behind it are cancelled;
  // Join raises the error once, then scheduling works again.
  // Queued behind 10 closures of 20 steps, the failing one starts once the
  // 400 after it are queued, whatever the machine's load.
  std::vector<RemoteValue> before;
  for (int i = 0; i < 10; ++i) {
    before.push_back(*c.Schedule("train_step", absl::StrCat("0 ", 1280 * i, " ",
                                                            1280 * (i + 1), " 64 1")));
  }
  absl::StatusOr<RemoteValue> bad = c.Schedule("train_step", "0 59990 70000 64 1");
  CHECK_THAT(bad.ok(), bad.status());
  std::vector<RemoteValue> after;
  for (int i = 0; i < 400; ++i) {
    absl::StatusOr<RemoteValue> v = c.Schedule("train_step", Good(64 * (i % 900)));
    if (!v.ok()) {
      // The failure was raised at Schedule (TF does the same).
      CHECK_THAT(absl::IsInvalidArgument(v.status()), v.status());
      break;
    }
    after.push_back(*v);
  }
  absl::StatusOr<std::string> failed = bad->Fetch();
  CHECK_THAT(absl::IsInvalidArgument(failed.status()), failed.status());
  CHECK_THAT(absl::StrContains(failed.status().message(),
                               "raised INVALID_ARGUMENT: split [59990, 70000) is outside the "
                               "60000 training examples"),
             failed.status());
  CHECK_THAT(absl::StrContains(failed.status().message(), "in function 'train_step'"),
             "the worker's traceback: " << failed.status());
  CHECK_THAT(bad->function_error().has_value(), "function_error()");
  for (const RemoteValue& v : before) CHECK_THAT(v.Fetch().ok(), v.Fetch().status());
  int ran = 0, cancelled = 0;
  for (const RemoteValue& v : after) {
    absl::StatusOr<std::string> r = v.Fetch();
    if (r.ok()) {
      ++ran;
    } else {
      CHECK_THAT(absl::IsCancelled(r.status()), r.status());
      ++cancelled;
    }
  }
  CHECK_THAT(cancelled > 0, "no closure after the failed one was cancelled");
  joined = c.Join();
  CHECK_THAT(joined.ok() || absl::IsInvalidArgument(joined), joined);
  CHECK_THAT(c.Join().ok(), "the error is raised once");
  std::printf("ok: a failing function: %s; after it %d ran, %d cancelled\n",
              failed.status().ToString().c_str(), ran, cancelled);

  absl::StatusOr<RemoteValue> again = c.Schedule("evaluate", "0 100");
  CHECK_THAT(again.ok(), again.status());
  absl::StatusOr<std::string> result = again->Fetch();
  CHECK_THAT(result.ok(), result.status());
  CHECK_THAT(c.Join().ok(), "Join after recovering");
  absl::StatusOr<bool> done = c.Done();
  CHECK_THAT(done.ok() && *done, "Done");
  std::printf("ok: scheduling works again after the error (evaluate: %s)\n", result->c_str());
  return 0;
}

}  // namespace
}  // namespace pscluster::examples

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return pscluster::examples::Run();
}
