// FunctionRunner: how a worker runs a program job's functions (FUNCTION
// closures, function_job.h), and FunctionRegistry, the runner of C++
// functions registered by name in the worker binary a user builds
// (api/pscluster/function_worker.h).
//
// The runner is the hook: the Python worker (python/worker_bindings.cc,
// `python3 -m pscluster.worker`) implements FunctionRunner to unpickle and
// call Python functions; the worker core sees only names, argument bytes and
// result bytes.
//
// Thread-safety: FunctionRunner implementations must be thread-safe (closures
// run concurrently). FunctionRegistry is: Register and Run may race.
#ifndef PSCLUSTER_WORKER_CORE_FUNCTION_REGISTRY_H_
#define PSCLUSTER_WORKER_CORE_FUNCTION_REGISTRY_H_

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "protos/worker.pb.h"
#include "worker/core/function_context.h"

namespace pscluster {

// What running a function gave: its result bytes, or the error it raised.
struct FunctionOutcome {
  std::string result;
  std::optional<FunctionError> error;
};

class FunctionRunner {
 public:
  virtual ~FunctionRunner() = default;
  // OK if this runner has a function `name`; else NOT_FOUND naming it and
  // the functions it has (the closure then fails, not retried).
  virtual absl::Status Check(const std::string& name) const = 0;
  // Runs function `name` on `args`, with `context` for its variables. The
  // function's own failure (a non-OK status it returns, an exception it
  // throws) is outcome.error; nothing it does may escape as an exception.
  // REQUIRES: Check(name) is OK.
  virtual FunctionOutcome Run(const std::string& name, const std::string& args,
                              FunctionContext* context) = 0;
};

// A C++ function a program schedules by name: gets the closure's context
// and its argument bytes, returns its result bytes, or an error that fails
// the closure (TF: an exception in the function).
using Function =
    std::function<absl::StatusOr<std::string>(FunctionContext& context, const std::string& args)>;

class FunctionRegistry final : public FunctionRunner {
 public:
  // INVALID_ARGUMENT for an empty name or an empty function; ALREADY_EXISTS
  // for a name registered before.
  absl::Status Register(const std::string& name, Function function) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Check(const std::string& name) const override ABSL_LOCKS_EXCLUDED(mu_);
  // A returned error becomes FunctionError{type: its code's name, message};
  // a std::exception {type: "std::exception", message: what()}; anything
  // else thrown {type: "unknown exception"}.
  FunctionOutcome Run(const std::string& name, const std::string& args,
                      FunctionContext* context) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, Function> functions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_FUNCTION_REGISTRY_H_
