// _pscluster: the C++ half of the `pscluster` Python package (pybind11).
//
// Wraps api/pscluster/job_client.h (JobClient) and
// api/pscluster/local_process_cluster.h (LocalProcessCluster) one call to
// one call; coordinator_bindings.cc binds the ClusterCoordinator and
// worker_bindings.cc the Python worker's FunctionRunner. Statuses become pscluster.Error with .code (the absl/gRPC code
// name, "NOT_FOUND") and .message; job statuses and events cross as JSON text
// in psctl's -o json schema (client/result_json.h), which the Python side
// json.loads. Every blocking call releases the GIL and polls for Ctrl-C.
//
// Thread-safety: a Client may be used from several Python threads at once
// (JobClient is thread-safe); a Cluster from the thread that started it.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/pscluster/job_client.h"
#include "api/pscluster/local_process_cluster.h"
#include "client/result_json.h"
#include "python/ext_common.h"

namespace py = pybind11;

namespace pscluster {
namespace {

// pscluster.Error, created at import; never freed (outlives the module's
// last use at interpreter exit).
py::object* error_type = nullptr;

absl::Duration Seconds(std::optional<double> seconds) {
  return seconds ? absl::Seconds(*seconds) : absl::InfiniteDuration();
}

// True once Python has a pending signal (Ctrl-C raises KeyboardInterrupt
// from PyErr_CheckSignals); the error stays set for the caller to raise.
// Called with the GIL released.
bool PythonInterrupted() {
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;
}

// Runs `rpc` (returning a StatusOr) without the GIL; its value, or
// StatusError.
template <typename F>
auto Call(F rpc) -> decltype(ValueOrThrow(rpc())) {
  decltype(rpc()) result;
  {
    py::gil_scoped_release nogil;
    result = rpc();
  }
  return ValueOrThrow(std::move(result));
}

class PyClient {
 public:
  PyClient(const std::string& address, const std::string& token, const std::string& tls_cert,
           const std::string& tls_key, const std::string& tls_ca,
           const std::string& tls_server_name, double connect_timeout_s, double rpc_timeout_s) {
    JobClientOptions options;
    options.token = token;
    options.tls_cert = tls_cert;
    options.tls_key = tls_key;
    options.tls_ca = tls_ca;
    options.tls_server_name = tls_server_name;
    options.connect_timeout = absl::Seconds(connect_timeout_s);
    options.rpc_timeout = absl::Seconds(rpc_timeout_s);
    absl::StatusOr<std::unique_ptr<JobClient>> client;
    {
      py::gil_scoped_release nogil;
      client = JobClient::Connect(address, options);
    }
    client_ = ValueOrThrow(std::move(client));
  }

  std::string Submit(const std::string& spec_yaml, const std::string& spec_path) {
    return Call([&] { return client_->Submit(spec_yaml, spec_path); });
  }

  std::string SubmitFile(const std::string& spec_path) {
    return Call([&] { return client_->SubmitFile(spec_path); });
  }

  std::string Status(const std::string& job_id) {
    return JobStatusJson(Call([&] { return client_->Get(job_id); })).dump();
  }

  // `on_update` (may be None) gets each status as JSON text, with the GIL.
  std::string Watch(const std::string& job_id, std::optional<double> timeout_s,
                    std::optional<std::function<void(std::string)>> on_update) {
    WatchOptions options;
    options.timeout = Seconds(timeout_s);
    // An exception in on_update ends the watch and is raised here.
    std::atomic<bool> callback_failed{false};
    std::optional<py::error_already_set> callback_error;  // set with the GIL
    if (on_update) {
      options.on_update = [&](const JobStatusProto& status) {
        if (callback_failed) return;
        const std::string json = JobStatusJson(status).dump();
        py::gil_scoped_acquire gil;
        try {
          (*on_update)(json);
        } catch (py::error_already_set& e) {
          callback_error = std::move(e);
          callback_failed = true;
        }
      };
    }
    bool interrupted = false;
    options.interrupted = [&] {
      if (callback_failed) return true;
      interrupted = PythonInterrupted();
      return interrupted;
    };
    absl::StatusOr<JobStatusProto> final_status;
    {
      py::gil_scoped_release nogil;
      final_status = client_->Watch(job_id, options);
    }
    if (interrupted) throw py::error_already_set();
    if (callback_error) throw std::move(*callback_error);
    return JobStatusJson(ValueOrThrow(std::move(final_status))).dump();
  }

  std::string Events(const std::string& job_id) {
    return JobEventsJson(job_id, Call([&] { return client_->Events(job_id); })).dump();
  }

  void Cancel(const std::string& job_id) {
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->Cancel(job_id);
    }
    OkOrThrow(s);
  }

  std::string List() { return JobListJson(Call([&] { return client_->List(); })).dump(); }

  const std::string& address() const { return client_->address(); }

 private:
  std::unique_ptr<JobClient> client_;
};

class PyCluster {
 public:
  PyCluster(int num_ps, int num_workers, bool tls, const std::string& run_dir, bool keep_run_dir,
            const std::string& bin_dir, const std::vector<std::string>& data_roots,
            double start_timeout_s, const std::vector<std::string>& worker_command) {
    LocalProcessClusterOptions options;
    options.num_ps = num_ps;
    options.num_workers = num_workers;
    options.tls = tls;
    options.run_dir = run_dir;
    options.keep_run_dir = keep_run_dir;
    options.bin_dir = bin_dir;
    options.data_roots = data_roots;
    options.start_timeout = absl::Seconds(start_timeout_s);
    options.worker_command = worker_command;
    bool interrupted = false;
    options.interrupted = [&interrupted] { return interrupted = PythonInterrupted(); };
    absl::StatusOr<std::unique_ptr<LocalProcessCluster>> started;
    {
      py::gil_scoped_release nogil;
      started = LocalProcessCluster::Start(options);
    }
    if (interrupted) throw py::error_already_set();
    cluster_ = ValueOrThrow(std::move(started));
  }

  const std::string& address() const { return cluster_->address(); }
  const std::string& token() const { return cluster_->token(); }
  const std::string& run_dir() const { return cluster_->run_dir(); }
  std::vector<int> pids() const { return cluster_->pids(); }
  // (cert, key, ca, server_name); all empty without TLS.
  std::vector<std::string> tls_files() const {
    const JobClientOptions o = cluster_->client_options();
    return {o.tls_cert, o.tls_key, o.tls_ca, o.tls_server_name};
  }

  void Stop(double grace_s) {
    py::gil_scoped_release nogil;
    cluster_->Stop(absl::Seconds(grace_s));
  }

 private:
  std::unique_ptr<LocalProcessCluster> cluster_;
};

}  // namespace
}  // namespace pscluster

PYBIND11_MODULE(_pscluster, m) {
  using pscluster::PyClient;
  using pscluster::PyCluster;
  m.doc() = "C++ core of the pscluster package (use `import pscluster`).";

  pscluster::error_type = new py::object(py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "pscluster.Error",
      "A pscluster call failed. .code is the gRPC/absl status code name (e.g. "
      "'NOT_FOUND', 'INVALID_ARGUMENT', 'UNAUTHENTICATED'), .message what went wrong.",
      PyExc_Exception, nullptr)));
  m.attr("Error") = *pscluster::error_type;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const pscluster::StatusError& e) {
      const std::string code = absl::StatusCodeToString(e.status.code());
      const std::string message(e.status.message());
      py::object error = (*pscluster::error_type)(absl::StrCat(code, ": ", message));
      error.attr("code") = code;
      error.attr("message") = message;
      PyErr_SetObject(pscluster::error_type->ptr(), error.ptr());
    }
  });

  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, const std::string&, const std::string&,
                    const std::string&, const std::string&, const std::string&, double, double>(),
           py::arg("address"), py::arg("token"), py::arg("tls_cert"), py::arg("tls_key"),
           py::arg("tls_ca"), py::arg("tls_server_name"), py::arg("connect_timeout_s"),
           py::arg("rpc_timeout_s"))
      .def_property_readonly("address", &PyClient::address)
      .def("submit", &PyClient::Submit, py::arg("spec_yaml"), py::arg("spec_path"))
      .def("submit_file", &PyClient::SubmitFile, py::arg("spec_path"))
      .def("status", &PyClient::Status, py::arg("job_id"))
      .def("watch", &PyClient::Watch, py::arg("job_id"), py::arg("timeout_s"),
           py::arg("on_update"))
      .def("events", &PyClient::Events, py::arg("job_id"))
      .def("cancel", &PyClient::Cancel, py::arg("job_id"))
      .def("list", &PyClient::List);

  py::class_<PyCluster>(m, "Cluster")
      .def(py::init<int, int, bool, const std::string&, bool, const std::string&,
                    const std::vector<std::string>&, double, const std::vector<std::string>&>(),
           py::arg("num_ps"), py::arg("num_workers"), py::arg("tls"), py::arg("run_dir"),
           py::arg("keep_run_dir"), py::arg("bin_dir"), py::arg("data_roots"),
           py::arg("start_timeout_s"), py::arg("worker_command"))
      .def_property_readonly("address", &PyCluster::address)
      .def_property_readonly("token", &PyCluster::token)
      .def_property_readonly("run_dir", &PyCluster::run_dir)
      .def_property_readonly("tls_files", &PyCluster::tls_files)
      .def("pids", &PyCluster::pids)
      .def("stop", &PyCluster::Stop, py::arg("grace_s"));

  pscluster::BindCoordinator(m);
  pscluster::BindWorker(m);
}
