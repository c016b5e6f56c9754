// The program side of the Python ClusterCoordinator: binds
// api/pscluster/cluster_coordinator.h (ClusterCoordinator, RemoteValue) one
// call to one call. Scheduling, retries and worker failures stay in the C++
// core; Python only pickles the function and its arguments into Schedule's
// argument bytes (python/pscluster/_coordinator.py).
//
// Every call that may block (the first Schedule starts the cluster, Join,
// Fetch, PsStats, Save, Restore, the step counters) releases the GIL; Join
// and Fetch wait in slices and raise KeyboardInterrupt on Ctrl-C.
// Initializers and optimizers cross as protobuf text (InitializerProto,
// OptimizerProto of protos/ps.proto).
//
// Thread-safety: as ClusterCoordinator and RemoteValue, thread-safe.
#include <google/protobuf/text_format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/pscluster/cluster_coordinator.h"
#include "python/ext_common.h"

namespace py = pybind11;

namespace pscluster {
namespace {

// Parses protobuf text into `message`; INVALID_ARGUMENT naming `what`.
template <typename Proto>
Proto ParseText(const std::string& text, const std::string& what) {
  Proto message;
  if (!google::protobuf::TextFormat::ParseFromString(text, &message)) {
    throw StatusError{absl::InvalidArgumentError(
        absl::StrCat("cannot read the ", what, " '", text, "'"))};
  }
  return message;
}

// How long a blocking wait runs without the GIL before it checks for
// signals (Ctrl-C).
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

class PyRemoteValue {
 public:
  explicit PyRemoteValue(RemoteValue value) : value_(std::move(value)) {}

  // The result bytes; the closure's error as StatusError.
  py::bytes Fetch() {
    // In slices, so that Ctrl-C (a signal handled on the main thread, when
    // it holds the GIL) raises KeyboardInterrupt instead of waiting.
    while (true) {
      bool ended;
      {
        py::gil_scoped_release nogil;
        ended = value_.WaitFor(kWaitSlice);
      }
      if (ended) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    absl::StatusOr<std::string> result = value_.Fetch();
    return py::bytes(ValueOrThrow(std::move(result)));
  }
  bool ready() const { return value_.ready(); }
  int64_t closure_id() const { return value_.closure_id(); }
  // (type, message, traceback) of the function's own error, or None.
  std::optional<std::vector<std::string>> function_error() const {
    std::optional<FunctionError> e = value_.function_error();
    if (!e) return std::nullopt;
    return std::vector<std::string>{e->type(), e->message(), e->traceback()};
  }

 private:
  RemoteValue value_;
};

class PyCoordinator {
 public:
  PyCoordinator(std::vector<std::string> ps, std::vector<std::string> workers,
                std::string cluster_file, std::string job_id, const std::string& partitioner,
                int closures_per_worker, int max_attempts, int64_t max_steps_per_closure,
                double health_interval_s, double worker_timeout_s, double cluster_wait_s,
                double ps_timeout_s, double closure_timeout_s, std::string checkpoint_root,
                std::string checkpoint_dir, int64_t checkpoint_every_steps,
                double checkpoint_every_s, int64_t checkpoint_keep,
                double ps_recovery_timeout_s) {
    ClusterCoordinator::Options options;
    options.ps_addresses = std::move(ps);
    options.worker_addresses = std::move(workers);
    options.cluster_file = std::move(cluster_file);
    options.job_id = std::move(job_id);
    options.partitioner = ValueOrThrow(ParsePartitioner(partitioner));
    options.closures_per_worker = closures_per_worker;
    options.max_attempts = max_attempts;
    options.max_steps_per_closure = max_steps_per_closure;
    options.health_interval = absl::Seconds(health_interval_s);
    options.worker_timeout = absl::Seconds(worker_timeout_s);
    options.cluster_wait = absl::Seconds(cluster_wait_s);
    options.ps_timeout = absl::Seconds(ps_timeout_s);
    options.closure_timeout = absl::Seconds(closure_timeout_s);
    options.checkpoint_root = std::move(checkpoint_root);
    options.checkpoint_dir = std::move(checkpoint_dir);
    options.checkpoint_every_steps = checkpoint_every_steps;
    options.checkpoint_every = absl::Seconds(checkpoint_every_s);
    options.checkpoint_keep = checkpoint_keep;
    options.ps_recovery_timeout = absl::Seconds(ps_recovery_timeout_s);
    coordinator_ = ValueOrThrow(ClusterCoordinator::Create(std::move(options)));
  }

  ~PyCoordinator() { Close(); }

  // Cancels what is queued, waits for closures in flight and frees the
  // job's variables (the C++ destructor). Idempotent.
  void Close() {
    if (coordinator_ == nullptr) return;
    std::unique_ptr<ClusterCoordinator> doomed = std::move(coordinator_);
    py::gil_scoped_release nogil;
    doomed.reset();
  }

  void CreateVariable(const std::string& name, std::vector<int64_t> shape,
                      const std::string& initializer, const std::string& optimizer) {
    InitializerProto init = ParseText<InitializerProto>(initializer, "initializer");
    OptimizerProto opt = ParseText<OptimizerProto>(optimizer, "optimizer");
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = Get()->CreateVariable(name, std::move(shape), std::move(init), std::move(opt));
    }
    OkOrThrow(s);
  }

  // `eviction`: "lfu" or "age" (EvictionPolicy); INVALID_ARGUMENT otherwise.
  void CreateHashTable(const std::string& name, int64_t dim, int64_t max_rows,
                       const std::string& eviction, const std::string& initializer,
                       const std::string& optimizer) {
    ClusterCoordinator* c = Get();
    EvictionPolicy policy;
    if (eviction == "lfu") {
      policy = LFU;
    } else if (eviction == "age") {
      policy = AGE;
    } else {
      throw StatusError{absl::InvalidArgumentError(absl::StrCat(
          "hash table '", name, "': eviction must be 'lfu' or 'age', not '", eviction, "'"))};
    }
    InitializerProto init = ParseText<InitializerProto>(initializer, "initializer");
    OptimizerProto opt = ParseText<OptimizerProto>(optimizer, "optimizer");
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = c->CreateHashTable(name, dim, max_rows, policy, std::move(init), std::move(opt));
    }
    OkOrThrow(s);
  }

  // Save / Restore pause dispatch and wait for the closures in flight.
  void Save(const std::string& dir) {
    ClusterCoordinator* c = Get();
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = c->Save(dir);
    }
    OkOrThrow(s);
  }

  void Restore(const std::string& dir) {
    ClusterCoordinator* c = Get();
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = c->Restore(dir);
    }
    OkOrThrow(s);
  }

  int64_t lost_steps() {
    ClusterCoordinator* c = Get();
    py::gil_scoped_release nogil;
    return c->lost_steps();
  }
  int64_t global_step() {
    ClusterCoordinator* c = Get();
    py::gil_scoped_release nogil;
    return c->global_step();
  }
  int64_t ps_recoveries() {
    ClusterCoordinator* c = Get();
    py::gil_scoped_release nogil;
    return c->ps_recoveries();
  }

  PyRemoteValue Schedule(const std::string& function, const py::bytes& args) {
    std::string bytes = args;
    absl::StatusOr<RemoteValue> value;
    {
      py::gil_scoped_release nogil;
      value = Get()->Schedule(function, std::move(bytes));
    }
    return PyRemoteValue(ValueOrThrow(std::move(value)));
  }

  // In slices, as PyRemoteValue::Fetch: Ctrl-C raises KeyboardInterrupt
  // (the closures go on; a later join() waits for them).
  void Join() {
    ClusterCoordinator* c = Get();
    while (true) {
      absl::StatusOr<bool> ended;
      {
        py::gil_scoped_release nogil;
        ended = c->JoinFor(kWaitSlice);
      }
      if (ValueOrThrow(std::move(ended))) return;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  bool Done() { return ValueOrThrow(Get()->Done()); }
  int64_t steps() { return Get()->steps(); }
  std::string job_id() { return Get()->job_id(); }

  // Per PS: {"applied_steps", "duplicate_steps", "applied_updates",
  // "held_keys", "incarnation"}.
  std::vector<py::dict> PsStats() {
    absl::StatusOr<std::vector<StatsResponse>> stats;
    {
      py::gil_scoped_release nogil;
      stats = Get()->PsStats();
    }
    std::vector<py::dict> out;
    for (const StatsResponse& s : ValueOrThrow(std::move(stats))) {
      py::dict d;
      d["applied_steps"] = s.applied_steps();
      d["duplicate_steps"] = s.duplicate_steps();
      d["applied_updates"] = s.applied_updates();
      d["held_keys"] = s.held_keys();
      d["incarnation"] = s.incarnation();
      py::list variables;
      for (const auto& v : s.variables()) variables.append(v.name());
      d["variables"] = variables;
      out.push_back(std::move(d));
    }
    return out;
  }

 private:
  ClusterCoordinator* Get() {
    if (coordinator_ == nullptr) {
      throw StatusError{absl::FailedPreconditionError("the ClusterCoordinator is closed")};
    }
    return coordinator_.get();
  }

  std::unique_ptr<ClusterCoordinator> coordinator_;
};

}  // namespace

void BindCoordinator(py::module_& m) {
  m.def(
      "check_partitioner",
      [](const std::string& text) { ValueOrThrow(ParsePartitioner(text)); },
      py::arg("text"), "INVALID_ARGUMENT (pscluster.Error) unless `text` is a partitioner.");

  py::class_<PyRemoteValue>(m, "RemoteValue")
      .def("fetch", &PyRemoteValue::Fetch)
      .def("ready", &PyRemoteValue::ready)
      .def_property_readonly("closure_id", &PyRemoteValue::closure_id)
      .def("function_error", &PyRemoteValue::function_error);

  py::class_<PyCoordinator>(m, "ClusterCoordinator")
      .def(py::init<std::vector<std::string>, std::vector<std::string>, std::string, std::string,
                    const std::string&, int, int, int64_t, double, double, double, double,
                    double, std::string, std::string, int64_t, double, int64_t, double>(),
           py::arg("ps"), py::arg("workers"), py::arg("cluster_file"), py::arg("job_id"),
           py::arg("partitioner"), py::arg("closures_per_worker"), py::arg("max_attempts"),
           py::arg("max_steps_per_closure"), py::arg("health_interval_s"),
           py::arg("worker_timeout_s"), py::arg("cluster_wait_s"), py::arg("ps_timeout_s"),
           py::arg("closure_timeout_s"), py::arg("checkpoint_root"), py::arg("checkpoint_dir"),
           py::arg("checkpoint_every_steps"), py::arg("checkpoint_every_s"),
           py::arg("checkpoint_keep"), py::arg("ps_recovery_timeout_s"))
      .def("create_variable", &PyCoordinator::CreateVariable, py::arg("name"), py::arg("shape"),
           py::arg("initializer"), py::arg("optimizer"))
      .def("create_hash_table", &PyCoordinator::CreateHashTable, py::arg("name"),
           py::arg("dim"), py::arg("max_rows"), py::arg("eviction"), py::arg("initializer"),
           py::arg("optimizer"))
      .def("save", &PyCoordinator::Save, py::arg("dir"))
      .def("restore", &PyCoordinator::Restore, py::arg("dir"))
      .def("lost_steps", &PyCoordinator::lost_steps)
      .def("global_step", &PyCoordinator::global_step)
      .def("ps_recoveries", &PyCoordinator::ps_recoveries)
      .def("schedule", &PyCoordinator::Schedule, py::arg("function"), py::arg("args"))
      .def("join", &PyCoordinator::Join)
      .def("done", &PyCoordinator::Done)
      .def("steps", &PyCoordinator::steps)
      .def("ps_stats", &PyCoordinator::PsStats)
      .def_property_readonly("job_id", &PyCoordinator::job_id)
      .def("close", &PyCoordinator::Close);
}

}  // namespace pscluster
