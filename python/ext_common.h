// Shared by the _pscluster extension's binding files (python/*.cc): how a
// non-OK absl::Status crosses into Python as pscluster.Error.
//
// StatusError is thrown by binding code and translated (pscluster_ext.cc's
// exception translator) into pscluster.Error with .code (the absl/gRPC code
// name, "NOT_FOUND") and .message.
#ifndef PSCLUSTER_PYTHON_EXT_COMMON_H_
#define PSCLUSTER_PYTHON_EXT_COMMON_H_

#include <pybind11/pybind11.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {

// A non-OK status on its way to Python.
struct StatusError {
  absl::Status status;
};

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw StatusError{value.status()};
  return *std::move(value);
}

inline void OkOrThrow(const absl::Status& status) {
  if (!status.ok()) throw StatusError{status};
}

// Binds ClusterCoordinator and RemoteValue (coordinator_bindings.cc).
void BindCoordinator(pybind11::module_& m);
// Binds FunctionContext and run_function_worker, the Python worker
// (worker_bindings.cc).
void BindWorker(pybind11::module_& m);

}  // namespace pscluster

#endif  // PSCLUSTER_PYTHON_EXT_COMMON_H_
