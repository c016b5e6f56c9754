// recovery_test_worker: the worker binary of cluster_coordinator_recovery_test
// (testonly), with functions whose effect on the variables is known:
//
//   "push"  args "STEPS[:VARS][:SLEEP_MS]": STEPS pushes (steps), each with
//           the gradient g[i] = ((i % 7) + 1) / 1000 for every element i of
//           every variable in VARS (comma-separated; default "w,b"),
//           sleeping SLEEP_MS after each (so a fault can land mid-closure).
//           Returns the number of steps as text.
//   "read"  args "VARS": the variables' values, pulled whole, as raw
//           float32 bytes one variable after the other.
//   "push_rows" args "VAR:ID,ID,...:STEPS": STEPS pushes of the gradient
//           (j + 1) / 100 for element j of each of the rows IDS (any int64
//           keys of a hash table). Returns the number of steps as text.
//   "read_rows" args "VAR:ID,ID,...": those rows, as raw float32 bytes.
//
// Takes worker_server's flags (--address ...).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "api/pscluster/function_worker.h"

namespace pscluster {
namespace {

std::vector<std::string> Names(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

absl::StatusOr<std::string> Push(FunctionContext& context, const std::string& args) {
  const std::vector<std::string> parts = absl::StrSplit(args, ':');
  int64_t steps = 0;
  int64_t sleep_ms = 0;
  if (parts.empty() || !absl::SimpleAtoi(parts[0], &steps) || steps < 0 ||
      (parts.size() > 2 && !absl::SimpleAtoi(parts[2], &sleep_ms))) {
    return absl::InvalidArgumentError(absl::StrCat("push: bad args '", args, "'"));
  }
  const std::vector<std::string> names = Names(parts.size() > 1 ? parts[1] : "w,b");
  // The shapes, from one pull (a read under the closure's lease).
  absl::StatusOr<std::vector<Tensor>> values = context.Pull(names);
  if (!values.ok()) return values.status();
  std::vector<std::pair<std::string, Tensor>> gradients;
  for (size_t v = 0; v < names.size(); ++v) {
    Tensor g((*values)[v].shape());
    absl::Span<float> out = g.values();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>((i % 7) + 1) / 1000.0f;
    gradients.emplace_back(names[v], std::move(g));
  }
  for (int64_t s = 0; s < steps; ++s) {
    if (absl::Status st = context.Push(gradients); !st.ok()) return st;
    if (sleep_ms > 0) absl::SleepFor(absl::Milliseconds(sleep_ms));
  }
  return absl::StrCat(steps);
}

absl::StatusOr<std::string> Read(FunctionContext& context, const std::string& args) {
  absl::StatusOr<std::vector<Tensor>> values = context.Pull(Names(args));
  if (!values.ok()) return values.status();
  std::string out;
  for (const Tensor& t : *values) {
    out.append(reinterpret_cast<const char*>(t.data()), t.num_bytes());
  }
  return out;
}

// "VAR:ID,ID,..." -> the variable and the ids.
absl::Status ParseRows(const std::string& text, std::string* var, std::vector<int64_t>* ids) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() < 2) return absl::InvalidArgumentError(absl::StrCat("bad rows '", text, "'"));
  *var = parts[0];
  for (const std::string& id : Names(parts[1])) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(id, &v)) return absl::InvalidArgumentError(absl::StrCat("bad id ", id));
    ids->push_back(v);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PushRows(FunctionContext& context, const std::string& args) {
  std::string var;
  std::vector<int64_t> ids;
  if (absl::Status s = ParseRows(args, &var, &ids); !s.ok()) return s;
  const std::vector<std::string> parts = absl::StrSplit(args, ':');
  int64_t steps = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[2], &steps)) {
    return absl::InvalidArgumentError(absl::StrCat("push_rows: bad args '", args, "'"));
  }
  absl::StatusOr<Tensor> rows = context.PullRows(var, ids);
  if (!rows.ok()) return rows.status();
  Tensor g(rows->shape());
  const int64_t dim = rows->shape().back();
  absl::Span<float> out = g.values();
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(i % dim + 1) / 100.0f;
  for (int64_t s = 0; s < steps; ++s) {
    if (absl::Status st = context.PushRows(var, ids, g); !st.ok()) return st;
  }
  return absl::StrCat(steps);
}

absl::StatusOr<std::string> ReadRows(FunctionContext& context, const std::string& args) {
  std::string var;
  std::vector<int64_t> ids;
  if (absl::Status s = ParseRows(args, &var, &ids); !s.ok()) return s;
  absl::StatusOr<Tensor> rows = context.PullRows(var, ids);
  if (!rows.ok()) return rows.status();
  return std::string(reinterpret_cast<const char*>(rows->data()), rows->num_bytes());
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  pscluster::FunctionRegistry functions;
  if (!functions.Register("push", pscluster::Push).ok() ||
      !functions.Register("read", pscluster::Read).ok() ||
      !functions.Register("push_rows", pscluster::PushRows).ok() ||
      !functions.Register("read_rows", pscluster::ReadRows).ok()) {
    return 1;
  }
  return pscluster::RunFunctionWorker(argc, argv, &functions, "recovery_test_worker");
}
