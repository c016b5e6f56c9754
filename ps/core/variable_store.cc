#include "ps/core/variable_store.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "ps/core/optimizer.h"

namespace pscluster {

struct VariableStore::Variable {
  Variable(VariableSpecProto spec_in, std::unique_ptr<Optimizer> optimizer_in)
      : spec(std::move(spec_in)),
        shape(spec.shape().begin(), spec.shape().end()),
        optimizer(std::move(optimizer_in)) {}

  const VariableSpecProto spec;
  const Shape shape;
  const std::unique_ptr<const Optimizer> optimizer;

  absl::Mutex mu;
  std::vector<float> values ABSL_GUARDED_BY(mu);
  OptimizerSlots slots ABSL_GUARDED_BY(mu);
  int64_t updates ABSL_GUARDED_BY(mu) = 0;
};

struct VariableStore::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : applied_updates(prometheus::BuildCounter()
                            .Name("pscluster_ps_applied_updates_total")
                            .Help("Gradients applied to variables by the optimizer.")
                            .Register(r)
                            .Add({})),
        pull_requests(prometheus::BuildCounter()
                          .Name("pscluster_ps_pull_requests_total")
                          .Help("Pull requests served, successful or not.")
                          .Register(r)
                          .Add({})),
        push_requests(prometheus::BuildCounter()
                          .Name("pscluster_ps_push_requests_total")
                          .Help("Push requests received, successful or not.")
                          .Register(r)
                          .Add({})),
        bytes_pushed(prometheus::BuildCounter()
                         .Name("pscluster_ps_bytes_pushed_total")
                         .Help("Gradient payload bytes applied.")
                         .Register(r)
                         .Add({})),
        bytes_pulled(prometheus::BuildCounter()
                         .Name("pscluster_ps_bytes_pulled_total")
                         .Help("Variable payload bytes returned by pulls.")
                         .Register(r)
                         .Add({})) {}

  prometheus::Counter& applied_updates;
  prometheus::Counter& pull_requests;
  prometheus::Counter& push_requests;
  prometheus::Counter& bytes_pushed;
  prometheus::Counter& bytes_pulled;
};

namespace {

bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

// OK if `existing` may stand for `wanted`; ALREADY_EXISTS saying what differs.
absl::Status CheckSameSpec(const VariableSpecProto& existing, const VariableSpecProto& wanted) {
  const Shape have(existing.shape().begin(), existing.shape().end());
  const Shape want(wanted.shape().begin(), wanted.shape().end());
  if (have != want || existing.dtype() != wanted.dtype()) {
    return absl::AlreadyExistsError(absl::StrCat("variable '", wanted.name(),
                                                 "' already exists with shape ", ShapeString(have),
                                                 " (requested ", ShapeString(want), ")"));
  }
  if (!SameMessage(existing.initializer(), wanted.initializer())) {
    return absl::AlreadyExistsError(
        absl::StrCat("variable '", wanted.name(), "' already exists with a different initializer"));
  }
  if (!SameMessage(existing.optimizer(), wanted.optimizer())) {
    return absl::AlreadyExistsError(
        absl::StrCat("variable '", wanted.name(), "' already exists with a different optimizer"));
  }
  return absl::OkStatus();
}

// Checks everything about `spec` that does not depend on the store's contents
// and returns the variable's optimizer.
absl::StatusOr<std::unique_ptr<Optimizer>> ValidateSpec(const VariableSpecProto& spec,
                                                        int64_t max_elements) {
  if (spec.name().empty()) return absl::InvalidArgumentError("variable with an empty name");
  auto fail = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", spec.name(), "': ", s.message()));
  };
  if (spec.dtype() != DT_FLOAT32) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "dtype ", DType_Name(spec.dtype()), " is not supported (expected DT_FLOAT32)")));
  }
  if (absl::Status s = ValidateShape(spec.shape(), max_elements); !s.ok()) return fail(s);
  if (absl::Status s = ValidateInitializer(spec.initializer()); !s.ok()) return fail(s);
  auto optimizer = Optimizer::Create(spec.optimizer());
  if (!optimizer.ok()) return fail(optimizer.status());
  return optimizer;
}

}  // namespace

VariableStore::VariableStore(Options options) : options_(std::move(options)) {
  if (options_.registry) metrics_ = std::make_unique<Metrics>(*options_.registry);
}

VariableStore::~VariableStore() = default;

absl::StatusOr<VariableStore::Variable*> VariableStore::Find(const std::string& name) {
  absl::ReaderMutexLock lock(&map_mu_);
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown variable '", name, "'"));
  }
  return it->second.get();
}

absl::Status VariableStore::CreateVariables(const CreateVariablesRequest& request,
                                            CreateVariablesResponse* response) {
  // 1. Validate every spec; drop exact duplicates within the request.
  std::vector<std::unique_ptr<Variable>> pending;
  absl::flat_hash_map<std::string, const VariableSpecProto*> in_request;
  for (const VariableSpecProto& spec : request.variables()) {
    ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                     ValidateSpec(spec, options_.max_variable_elements));
    auto [it, inserted] = in_request.emplace(spec.name(), &spec);
    if (!inserted) {
      if (!CheckSameSpec(*it->second, spec).ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "variable '", spec.name(), "' appears twice in the request with different specs"));
      }
      continue;
    }
    pending.push_back(std::make_unique<Variable>(spec, std::move(optimizer)));
  }

  // 2. Skip variables that exist already (checked under the reader lock, so
  // large initialisations below run without any map lock held).
  int existing = 0;
  {
    absl::ReaderMutexLock lock(&map_mu_);
    for (auto& var : pending) {
      auto it = variables_.find(var->spec.name());
      if (it == variables_.end()) continue;
      RETURN_IF_ERROR(CheckSameSpec(it->second->spec, var->spec));
      ++existing;
      var.reset();
    }
  }

  // 3. Initialise the new variables.
  for (auto& var : pending) {
    if (var == nullptr) continue;
    absl::MutexLock lock(&var->mu);
    var->values.resize(NumElements(var->shape));
    RunInitializer(var->spec.initializer(), var->spec.name(), var->shape,
                   absl::MakeSpan(var->values));
    var->slots = var->optimizer->NewSlots(static_cast<int64_t>(var->values.size()));
  }

  // 4. Insert all or none; re-check, as another request may have raced us.
  absl::MutexLock lock(&map_mu_);
  for (auto& var : pending) {
    if (var == nullptr) continue;
    auto it = variables_.find(var->spec.name());
    if (it == variables_.end()) continue;
    RETURN_IF_ERROR(CheckSameSpec(it->second->spec, var->spec));
    ++existing;
    var.reset();
  }
  for (auto& var : pending) {
    if (var != nullptr) variables_.emplace(var->spec.name(), std::move(var));
  }
  response->set_existing(existing);
  return absl::OkStatus();
}

absl::Status VariableStore::Pull(const PullRequest& request, PullResponse* response) {
  if (metrics_) metrics_->pull_requests.Increment();
  std::vector<Variable*> vars;
  vars.reserve(request.names_size());
  for (const std::string& name : request.names()) {
    ASSIGN_OR_RETURN(Variable * var, Find(name));
    vars.push_back(var);
  }
  int64_t bytes = 0;
  response->mutable_tensors()->Reserve(static_cast<int>(vars.size()));
  for (Variable* var : vars) {
    NamedTensor* out = response->add_tensors();
    out->set_name(var->spec.name());
    absl::ReaderMutexLock lock(&var->mu);
    EncodeTensor(var->shape, var->values, out->mutable_tensor());
    bytes += static_cast<int64_t>(out->tensor().data().size());
  }
  if (metrics_) metrics_->bytes_pulled.Increment(static_cast<double>(bytes));
  return absl::OkStatus();
}

absl::Status VariableStore::Push(const PushRequest& request, PushResponse* /*response*/) {
  if (metrics_) metrics_->push_requests.Increment();
  // Check every gradient before applying any.
  std::vector<std::pair<Variable*, absl::Span<const float>>> updates;
  updates.reserve(request.gradients_size());
  int64_t bytes = 0;
  for (const NamedTensor& grad : request.gradients()) {
    ASSIGN_OR_RETURN(Variable * var, Find(grad.name()));
    ASSIGN_OR_RETURN(absl::Span<const float> values,
                     TensorView(grad.tensor(), var->shape,
                                absl::StrCat("gradient for variable '", grad.name(), "'")));
    updates.emplace_back(var, values);
    bytes += static_cast<int64_t>(grad.tensor().data().size());
  }
  for (auto& [var, grad] : updates) {
    absl::MutexLock lock(&var->mu);
    ++var->updates;
    var->optimizer->Apply(var->updates, grad, absl::MakeSpan(var->values), &var->slots);
  }
  applied_updates_.fetch_add(static_cast<int64_t>(updates.size()), std::memory_order_relaxed);
  if (metrics_) {
    metrics_->applied_updates.Increment(static_cast<double>(updates.size()));
    metrics_->bytes_pushed.Increment(static_cast<double>(bytes));
  }
  return absl::OkStatus();
}

absl::Status VariableStore::Stats(const StatsRequest& /*request*/, StatsResponse* response) {
  std::vector<Variable*> vars;
  {
    absl::ReaderMutexLock lock(&map_mu_);
    vars.reserve(variables_.size());
    for (auto& [name, var] : variables_) vars.push_back(var.get());
  }
  std::sort(vars.begin(), vars.end(),
            [](const Variable* a, const Variable* b) { return a->spec.name() < b->spec.name(); });
  for (Variable* var : vars) {
    VariableStats* s = response->add_variables();
    s->set_name(var->spec.name());
    s->mutable_shape()->Assign(var->shape.begin(), var->shape.end());
    absl::ReaderMutexLock lock(&var->mu);
    s->set_parameter_bytes(static_cast<int64_t>(var->values.size() * sizeof(float)));
    int64_t slot_bytes = 0;
    for (const auto& slot : var->slots)
      slot_bytes += static_cast<int64_t>(slot.size() * sizeof(float));
    s->set_slot_bytes(slot_bytes);
    s->set_updates(var->updates);
  }
  response->set_applied_updates(applied_updates_.load(std::memory_order_relaxed));
  return absl::OkStatus();
}

}  // namespace pscluster
