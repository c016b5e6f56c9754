// Fuzz target for the parameter server's request handling: the ps/core calls
// that ps/service/ps_service.cc makes for CreateVariables, Pull (whole
// variables and row lookups), Push (dense and sparse gradients, update keys,
// fused pulls) and PruneKeys, run in process on JobStores.
//
// Each input (ps_fuzz_input.h) is a short sequence of serialized requests,
// replayed on a fresh PS whose job "fuzz" holds a dense kernel and bias, a
// [8, 2] embedding table and a bounded hash table (the layout a coordinator
// creates for a small model). Every request's `job` is set to "fuzz". Besides
// "no crash, no sanitizer report" it checks the contracts of
// ps/core/variable_store.h:
//   - a failed call changes nothing (no variable, value, row or key);
//   - errors are NOT_FOUND, INVALID_ARGUMENT, ALREADY_EXISTS,
//     PERMISSION_DENIED (job keys) or RESOURCE_EXHAUSTED only;
//   - a pull returns one tensor per name and one [n, dim] block per lookup,
//     each with as many bytes as its shape says;
//   - a keyed push applied once is a duplicate when sent again, and changes
//     nothing then;
//   - created variables are listed by Stats.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/ps_fuzz_input.h"
#include "prometheus/registry.h"
#include "protos/ps.pb.h"
#include "ps/core/job_stores.h"

namespace pscluster {
namespace {

constexpr char kJob[] = "fuzz";
constexpr size_t kMaxRecords = 8;

// FUZZ_VERBOSE=1 in the environment: print each request's outcome (to see
// what a seed input exercises).
const bool kVerbose = std::getenv("FUZZ_VERBOSE") != nullptr;

void Log(const char* op, const absl::Status& s) {
  if (kVerbose) std::fprintf(stderr, "  %s: %s\n", op, s.ToString().c_str());
}

VariableSpecProto Spec(const std::string& name, std::vector<int64_t> shape, const char* init,
                       const char* optimizer, VariableKind kind = DENSE) {
  VariableSpecProto v;
  v.set_name(name);
  v.set_dtype(DT_FLOAT32);
  for (int64_t d : shape) v.add_shape(d);
  v.mutable_initializer()->set_type(init);
  if (std::string(init) == "random_uniform") {
    v.mutable_initializer()->set_minval(-0.05f);
    v.mutable_initializer()->set_maxval(0.05f);
  }
  OptimizerProto* o = v.mutable_optimizer();
  o->set_type(optimizer);
  o->set_learning_rate(0.1f);
  o->set_momentum(0.9f);
  o->set_beta1(0.9f);
  o->set_beta2(0.999f);
  o->set_epsilon(1e-7f);
  o->set_initial_accumulator_value(0.1f);
  o->set_learning_rate_power(-0.5f);
  v.set_kind(kind);
  return v;
}

// The variables every input starts from (make_ps_corpus.cc uses the same names).
CreateVariablesRequest InitialVariables() {
  CreateVariablesRequest request;
  request.set_job(kJob);
  *request.add_variables() = Spec("dense_0/kernel", {4, 3}, "glorot_uniform", "adam");
  *request.add_variables() = Spec("dense_0/bias", {3}, "zeros", "momentum");
  *request.add_variables() = Spec("embedding/cat", {8, 2}, "random_uniform", "adagrad");
  VariableSpecProto table =
      Spec("embedding/user/part_0", {2}, "random_uniform", "ftrl", HASH_TABLE);
  table.set_max_rows(4);
  *request.add_variables() = table;
  return request;
}

StatsResponse Stats(JobStores& ps) {
  StatsRequest request;
  request.set_job(kJob);
  StatsResponse stats;
  absl::Status s = ps.Stats(request, &stats);
  FUZZ_CHECK(s.ok(), s.ToString());
  return stats;
}

// Everything a request may change: the variables' stats (shape, rows,
// evictions, update counts), applied and held keys, and every dense value.
std::string Snapshot(JobStores& ps) {
  StatsResponse stats = Stats(ps);
  PullRequest pull;
  pull.set_job(kJob);
  for (const VariableStats& v : stats.variables()) {
    if (v.kind() == DENSE) pull.add_names(v.name());
  }
  PullResponse values;
  absl::Status s = ps.Pull(pull, &values);
  FUZZ_CHECK(s.ok(), absl::StrCat("pulling every dense variable: ", s.ToString()));
  stats.clear_incarnation();
  stats.clear_duplicate_steps();  // counts dropped pushes, checked in RunPush
  return stats.SerializeAsString() + values.SerializeAsString();
}

void CheckError(const absl::Status& s, const char* what) {
  const absl::StatusCode code = s.code();
  // PERMISSION_DENIED: a request under another job key (job_stores.h);
  // RESOURCE_EXHAUSTED: over the PS's memory budget.
  FUZZ_CHECK(code == absl::StatusCode::kNotFound || code == absl::StatusCode::kInvalidArgument ||
                 code == absl::StatusCode::kAlreadyExists ||
                 code == absl::StatusCode::kPermissionDenied ||
                 code == absl::StatusCode::kResourceExhausted,
             absl::StrCat(what, " failed with an unexpected code: ", s.ToString()));
  FUZZ_CHECK(!s.message().empty(), absl::StrCat(what, " failed without a message"));
}

int64_t Elements(const TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  return n;
}

void CheckTensor(const TensorProto& t, const std::string& what) {
  FUZZ_CHECK(t.dtype() == DT_FLOAT32, absl::StrCat(what, ": dtype ", t.dtype()));
  FUZZ_CHECK(static_cast<int64_t>(t.data().size()) == 4 * Elements(t),
             absl::StrCat(what, ": ", t.data().size(), " bytes for ", Elements(t), " elements"));
}

void CheckPullResponse(const PullRequest& request, const PullResponse& response) {
  FUZZ_CHECK(response.tensors_size() == request.names_size(), "one tensor per name");
  for (int i = 0; i < response.tensors_size(); ++i) {
    FUZZ_CHECK(response.tensors(i).name() == request.names(i), "tensors in request order");
    CheckTensor(response.tensors(i).tensor(), request.names(i));
  }
  FUZZ_CHECK(response.rows_size() == request.lookups_size(), "one block of rows per lookup");
  for (int i = 0; i < response.rows_size(); ++i) {
    const TensorProto& rows = response.rows(i).tensor();
    CheckTensor(rows, absl::StrCat("lookup ", i));
    const int64_t n = static_cast<int64_t>(request.lookups(i).ids().size() / 8);
    FUZZ_CHECK(rows.shape_size() == 2 && rows.shape(0) == n,
               absl::StrCat("lookup ", i, " of ", n, " ids returned ", rows.ShortDebugString()));
  }
}

void RunCreate(JobStores& ps, const std::string& payload) {
  CreateVariablesRequest request;
  if (!request.ParseFromString(payload)) return;
  request.set_job(kJob);
  const std::string before = Snapshot(ps);
  CreateVariablesResponse response;
  absl::Status s = ps.CreateVariables(request, &response);
  Log("CreateVariables", s);
  if (!s.ok()) {
    CheckError(s, "CreateVariables");
    FUZZ_CHECK(Snapshot(ps) == before, "a failed CreateVariables changed the store");
    return;
  }
  StatsResponse stats = Stats(ps);
  for (const VariableSpecProto& v : request.variables()) {
    bool found = false;
    for (const VariableStats& held : stats.variables()) found = found || held.name() == v.name();
    FUZZ_CHECK(found, absl::StrCat("created variable '", v.name(), "' is not in Stats"));
  }
}

void RunPull(JobStores& ps, const std::string& payload) {
  PullRequest request;
  if (!request.ParseFromString(payload)) return;
  request.set_job(kJob);
  const std::string before = Snapshot(ps);
  PullResponse response;
  absl::Status s = ps.Pull(request, &response);
  Log("Pull", s);
  if (!s.ok()) {
    CheckError(s, "Pull");
    FUZZ_CHECK(Snapshot(ps) == before, "a failed Pull created rows");
    return;
  }
  CheckPullResponse(request, response);
}

void RunPush(JobStores& ps, const std::string& payload) {
  PushRequest request;
  if (!request.ParseFromString(payload)) return;
  request.set_job(kJob);
  const std::string before = Snapshot(ps);
  PushResponse response;
  absl::Status s = ps.Push(request, &response);
  Log(response.duplicate() ? "Push (duplicate)" : "Push", s);
  if (!s.ok()) {
    CheckError(s, "Push");
    FUZZ_CHECK(Snapshot(ps) == before, "a failed Push changed the store");
    return;
  }
  if (request.has_pull()) {
    FUZZ_CHECK(response.has_pulled(), "a push with a pull returned no pulled values");
    CheckPullResponse(request.pull(), response.pulled());
  }
  if (response.duplicate()) {
    FUZZ_CHECK(request.has_update(), "a push without an update key was a duplicate");
  }
  if (!request.has_update()) return;
  // Exactly once: the same keyed push again is a duplicate and changes
  // nothing (a fused pull may still create hash rows, so compare without it).
  request.clear_pull();
  const std::string after = Snapshot(ps);
  const int64_t duplicates = Stats(ps).duplicate_steps();
  PushResponse again;
  s = ps.Push(request, &again);
  FUZZ_CHECK(s.ok(), absl::StrCat("repeating a push that was applied failed: ", s.ToString()));
  FUZZ_CHECK(again.duplicate(), "a keyed push applied twice");
  FUZZ_CHECK(Snapshot(ps) == after, "a duplicate push changed the store");
  FUZZ_CHECK(Stats(ps).duplicate_steps() == duplicates + 1, "a duplicate push was not counted");
}

void RunPruneKeys(JobStores& ps, const std::string& payload) {
  PruneKeysRequest request;
  if (!request.ParseFromString(payload)) return;
  request.set_job(kJob);
  PruneKeysResponse response;
  absl::Status s = ps.PruneKeys(request, &response);
  Log("PruneKeys", s);
  FUZZ_CHECK(s.ok(), absl::StrCat("PruneKeys never fails, got ", s.ToString()));
  FUZZ_CHECK(response.pruned() >= 0 && response.remaining() >= 0, response.ShortDebugString());
  FUZZ_CHECK(Stats(ps).held_keys() == response.remaining(), "held keys != remaining");
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;  // NOLINT(build/namespaces): a fuzz entry point
  VariableStore::Options options;
  options.max_variable_elements = 1 << 14;  // bounded memory per input
  options.registry = std::make_shared<prometheus::Registry>();
  JobStores ps(options);
  CreateVariablesResponse created;
  absl::Status s = ps.CreateVariables(InitialVariables(), &created);
  FUZZ_CHECK(s.ok(), s.ToString());

  for (const fuzz::PsRecord& record : fuzz::DecodeRecords(data, size, kMaxRecords)) {
    switch (record.op) {
      case fuzz::PsOp::kCreateVariables:
        RunCreate(ps, record.payload);
        break;
      case fuzz::PsOp::kPull:
        RunPull(ps, record.payload);
        break;
      case fuzz::PsOp::kPush:
        RunPush(ps, record.payload);
        break;
      case fuzz::PsOp::kPruneKeys:
        RunPruneKeys(ps, record.payload);
        break;
    }
  }
  return 0;
}
