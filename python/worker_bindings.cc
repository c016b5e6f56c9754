// The Python worker: a FunctionRunner (worker/core/function_registry.h) that
// runs pickled Python functions, and the FunctionContext those functions see.
//
// `python3 -m pscluster.worker FLAGS` (python/pscluster/worker.py) calls
// run_function_worker, which serves RunFunctionWorker
// (api/pscluster/function_worker.h) with PyFunctionRunner, the GIL released.
// Each FUNCTION closure then arrives on a gRPC thread: PyFunctionRunner::Run
// takes the GIL and calls pscluster._worker_runtime.run(name, args,
// context), which unpickles (fn, args, kwargs) with cloudpickle, binds the
// context as the thread's current one, calls fn, and pickles its result; an
// exception comes back as (type, message, traceback) and becomes the
// closure's FunctionError. The function's pulls and pushes go through
// PyFunctionContext to the closure's C++ FunctionContext, the GIL released
// during each RPC, so every update carries the closure's exactly-once key;
// each push also reads back the variables read since the last one, for the
// next read (PyFunctionContext).
//
// Thread-safety: PyFunctionRunner is thread-safe (the GIL serialises the
// Python it runs). A PyFunctionContext belongs to one running closure and is
// invalid (FAILED_PRECONDITION) once the closure returned; its state is
// touched only with the GIL held.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "api/pscluster/function_worker.h"
#include "common/tensor.h"
#include "python/ext_common.h"

namespace py = pybind11;

namespace pscluster {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// A NumPy array over `t`'s elements, copying nothing: the array owns the
// tensor.
py::array_t<float> ToNumpy(Tensor t) {
  auto* owned = new Tensor(std::move(t));
  py::capsule owner(owned, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array_t<float>(std::vector<py::ssize_t>(owned->shape().begin(), owned->shape().end()),
                            owned->data(), owner);
}

Tensor FromNumpy(const FloatArray& a) {
  Tensor t(Shape(a.shape(), a.shape() + a.ndim()));
  if (a.size() > 0) std::memcpy(t.data(), a.data(), sizeof(float) * a.size());
  return t;
}

std::vector<int64_t> Ids(const IdArray& ids) {
  if (ids.ndim() != 1) {
    throw StatusError{absl::InvalidArgumentError(
        absl::StrCat("ids must be a 1-D array of integers, not ", ids.ndim(), "-D"))};
  }
  return std::vector<int64_t>(ids.data(), ids.data() + ids.size());
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The closure's FunctionContext as Python sees it, valid while it runs.
//
// A push reads ahead (FunctionContext::PushAndPull): the whole variables the
// function read since its last push come back with the push, and the first
// read of each after it is answered from there, without a round trip of its
// own. A training loop's read, compute, push then costs one round trip per
// PS a step, as the C++ trainer's does. A value read ahead is the variable
// as it was on its PS right after the closure's own push: every read still
// sees the closure's latest push, and a retried closure's pushes keep their
// keys (dropped as duplicates, the read ahead answered all the same). Rows
// (PullRows) are not read ahead; a row push drops its variable's value read
// ahead. A closure's last push reads ahead values nobody reads.
class PyFunctionContext {
 public:
  explicit PyFunctionContext(FunctionContext* context) : context_(context) {}

  void Invalidate() {
    context_ = nullptr;
    read_ahead_.clear();
    read_since_push_.clear();
  }

  std::vector<py::array_t<float>> Pull(const std::vector<std::string>& names) {
    FunctionContext* c = Get();
    absl::flat_hash_map<std::string, Tensor> values;
    std::vector<std::string> missing;
    for (const std::string& name : names) {
      if (values.contains(name) || Contains(missing, name)) continue;
      if (auto it = read_ahead_.find(name); it != read_ahead_.end()) {
        values.emplace(name, std::move(it->second));
        read_ahead_.erase(it);
      } else {
        missing.push_back(name);
      }
    }
    if (!missing.empty()) {
      absl::StatusOr<std::vector<Tensor>> tensors;
      {
        py::gil_scoped_release nogil;
        tensors = c->Pull(missing);
      }
      std::vector<Tensor> pulled = ValueOrThrow(std::move(tensors));
      for (size_t i = 0; i < missing.size(); ++i) values.emplace(missing[i], std::move(pulled[i]));
    }
    std::vector<py::array_t<float>> out;
    out.reserve(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = values.find(names[i]);
      if (it == values.end()) {  // named twice: a copy of the first one's
        const size_t first = std::find(names.begin(), names.end(), names[i]) - names.begin();
        out.push_back(out[first].attr("copy")().cast<py::array_t<float>>());
        continue;
      }
      out.push_back(ToNumpy(std::move(it->second)));
      values.erase(it);
      if (!Contains(read_since_push_, names[i])) read_since_push_.push_back(names[i]);
    }
    return out;
  }

  py::array_t<float> PullRows(const std::string& name, const IdArray& ids) {
    FunctionContext* c = Get();
    std::vector<int64_t> rows = Ids(ids);
    absl::StatusOr<Tensor> t;
    {
      py::gil_scoped_release nogil;
      t = c->PullRows(name, rows);
    }
    return ToNumpy(ValueOrThrow(std::move(t)));
  }

  void Push(const std::vector<std::pair<std::string, FloatArray>>& gradients) {
    FunctionContext* c = Get();
    // Encoded straight from the arrays, which `gradients` keeps alive.
    std::vector<FunctionContext::GradientView> views;
    views.reserve(gradients.size());
    for (const auto& [name, g] : gradients) {
      views.push_back({name, Shape(g.shape(), g.shape() + g.ndim()),
                       absl::MakeConstSpan(g.data(), static_cast<size_t>(g.size()))});
    }
    // Values read ahead by an earlier push are older than this one.
    read_ahead_.clear();
    std::vector<std::string> read_ahead;
    read_ahead.swap(read_since_push_);
    absl::StatusOr<std::vector<Tensor>> values;
    {
      py::gil_scoped_release nogil;
      values = c->PushAndPull(views, read_ahead);
    }
    std::vector<Tensor> read = ValueOrThrow(std::move(values));
    for (size_t i = 0; i < read.size(); ++i) read_ahead_.emplace(read_ahead[i], std::move(read[i]));
  }

  void PushRows(const std::string& name, const IdArray& ids, const FloatArray& rows) {
    FunctionContext* c = Get();
    std::vector<int64_t> id_list = Ids(ids);
    Tensor t = FromNumpy(rows);
    read_ahead_.erase(name);
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = c->PushRows(name, id_list, t);
    }
    OkOrThrow(s);
  }

  int64_t closure_id() { return Get()->closure_id(); }
  int64_t steps() { return Get()->steps(); }

 private:
  FunctionContext* Get() {
    if (context_ == nullptr) {
      throw StatusError{absl::FailedPreconditionError(
          "this function context is no longer valid: its closure has returned (pull and push "
          "only inside a scheduled function, on its own thread)")};
    }
    return context_;
  }

  FunctionContext* context_;
  // Values the last push read ahead, each until it is read.
  absl::flat_hash_map<std::string, Tensor> read_ahead_;
  // The whole variables read since the last push, in order: the next push
  // reads them ahead.
  std::vector<std::string> read_since_push_;
};

class PyFunctionRunner final : public FunctionRunner {
 public:
  // Any name: the function itself travels pickled in the arguments; the
  // name only labels it in errors.
  absl::Status Check(const std::string& name) const override { return absl::OkStatus(); }

  FunctionOutcome Run(const std::string& name, const std::string& args,
                      FunctionContext* context) override {
    FunctionOutcome outcome;
    py::gil_scoped_acquire gil;
    auto* handle = new PyFunctionContext(context);
    // Python owns the handle; it is invalidated below, so a context kept by
    // the function past its return fails instead of touching freed memory.
    py::object py_context = py::cast(handle, py::return_value_policy::take_ownership);
    try {
      py::object runtime = py::module_::import("pscluster._worker_runtime");
      py::tuple r = runtime.attr("run")(name, py::bytes(args), py_context);
      if (r[1].is_none()) {
        outcome.result = r[0].cast<std::string>();
      } else {
        auto e = r[1].cast<std::vector<std::string>>();
        FunctionError error;
        error.set_type(e.at(0));
        error.set_message(e.at(1));
        error.set_traceback(e.at(2));
        outcome.error = std::move(error);
      }
    } catch (py::error_already_set& e) {
      // The runtime itself failed (e.g. cloudpickle is missing here).
      FunctionError error;
      error.set_type(py::str(e.type().attr("__name__")).cast<std::string>());
      error.set_message(e.what());
      error.set_traceback(absl::StrCat("in the Python worker's runtime, running '", name, "'"));
      outcome.error = std::move(error);
    } catch (const std::exception& e) {
      FunctionError error;
      error.set_type("std::exception");
      error.set_message(e.what());
      outcome.error = std::move(error);
    }
    handle->Invalidate();
    return outcome;
  }
};

// Serves the worker until SIGTERM/SIGINT; the exit code.
int RunPythonWorker(const std::vector<std::string>& args) {
  static PyFunctionRunner* runner = new PyFunctionRunner();  // lives for the process
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  py::gil_scoped_release nogil;
  return RunFunctionWorker(static_cast<int>(copy.size()), argv.data(), runner, "python_worker");
}

}  // namespace

void BindWorker(py::module_& m) {
  py::class_<PyFunctionContext>(m, "FunctionContext")
      .def("pull", &PyFunctionContext::Pull, py::arg("names"))
      .def("pull_rows", &PyFunctionContext::PullRows, py::arg("name"), py::arg("ids"))
      .def("push", &PyFunctionContext::Push, py::arg("gradients"))
      .def("push_rows", &PyFunctionContext::PushRows, py::arg("name"), py::arg("ids"),
           py::arg("rows"))
      .def_property_readonly("closure_id", &PyFunctionContext::closure_id)
      .def_property_readonly("steps", &PyFunctionContext::steps);
  m.def("run_function_worker", &RunPythonWorker, py::arg("argv"),
        "Serves a Python worker task with worker_server's flags (argv[0] is the program "
        "name) until SIGTERM or SIGINT; returns the exit code.");
}

}  // namespace pscluster
