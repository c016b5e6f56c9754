#include "ps/core/variable_store.h"

#include <limits>

#include "absl/random/random.h"

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "ps/core/hash_table.h"
#include "ps/core/memory_budget.h"
#include "ps/core/optimizer.h"
#include "ps/core/push_validation.h"
#include "ps/core/variable_spec.h"
#include "ps/core/variable_store_internal.h"

namespace pscluster {

using variable_store_internal::RowRequest;

struct VariableStore::CheckedPull {
  std::vector<Variable*> vars;
  std::vector<RowRequest> lookups;
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
                         .Add({})),
        applied_steps(prometheus::BuildCounter()
                          .Name("pscluster_ps_applied_steps_total")
                          .Help("Pushes with an update key (closure_id, step) applied.")
                          .Register(r)
                          .Add({})),
        duplicate_steps(prometheus::BuildCounter()
                            .Name("pscluster_ps_duplicate_steps_total")
                            .Help("Pushes dropped because their update key had been applied.")
                            .Register(r)
                            .Add({})),
        evictions(prometheus::BuildCounter()
                      .Name("pscluster_ps_hash_table_evictions_total")
                      .Help("Hash-table rows evicted to stay within max_rows.")
                      .Register(r)),
        rejected_pushes(prometheus::BuildCounter()
                            .Name("pscluster_ps_rejected_pushes_total")
                            .Help("Pushes refused whole, by reason: non_finite (a NaN or Inf "
                                  "gradient), memory_limit (new hash-table rows past "
                                  "--max_memory_bytes).")
                            .Register(r)),
        rejected_non_finite(rejected_pushes.Add({{"reason", "non_finite"}})),
        rejected_memory(rejected_pushes.Add({{"reason", "memory_limit"}})),
        push_staleness(prometheus::BuildHistogram()
                           .Name("pscluster_ps_push_staleness")
                           .Help("Staleness of each push that carried its pull's version: the "
                                 "pushes this PS applied to the job between the step's pull "
                                 "and its push (docs/staleness.md).")
                           .Register(r)
                           .Add({}, prometheus::Histogram::BucketBoundaries{
                                        0, 1, 2, 4, 8, 16, 32, 64, 128})) {}

  prometheus::Counter& applied_updates;
  prometheus::Counter& pull_requests;
  prometheus::Counter& push_requests;
  prometheus::Counter& bytes_pushed;
  prometheus::Counter& bytes_pulled;
  prometheus::Counter& applied_steps;
  prometheus::Counter& duplicate_steps;
  prometheus::Family<prometheus::Counter>& evictions;  // label: variable
  prometheus::Family<prometheus::Counter>& rejected_pushes;  // label: reason
  prometheus::Counter& rejected_non_finite;
  prometheus::Counter& rejected_memory;
  prometheus::Histogram& push_staleness;
};

// The budget one request reserves for the hash-table rows it may create
// (HashTable::RowsToAdd bounds them), moved to the store's own charge as
// rows are created; what is not used goes back when the request ends.
// Without a budget it does nothing. Used by one thread.
class VariableStore::RowReservation {
 public:
  explicit RowReservation(VariableStore* store) : store_(store) {}
  ~RowReservation() {
    if (MemoryBudget* budget = store_->options_.memory_budget.get()) budget->Release(bytes_);
  }
  RowReservation(const RowReservation&) = delete;
  RowReservation& operator=(const RowReservation&) = delete;

  // Reserves room for the rows a lookup or sparse gradient of `ids` may add
  // to `table`. RESOURCE_EXHAUSTED naming `what` when the budget is full.
  absl::Status Add(const HashTable& table, absl::Span<const uint64_t> ids,
                   const std::string& what) {
    MemoryBudget* budget = store_->options_.memory_budget.get();
    if (budget == nullptr || ids.empty()) return absl::OkStatus();
    // Cheap bound first (no hash probes): every id new, as far as the table
    // can still grow. A full bounded table (evicting) needs nothing.
    int64_t rows = std::min<int64_t>(static_cast<int64_t>(ids.size()), table.FreeRows());
    if (rows == 0) return absl::OkStatus();
    if (!budget->TryReserve(rows * table.row_bytes())) {
      // Near the limit: count the ids really missing.
      rows = table.RowsToAdd(ids);
      RETURN_IF_ERROR(budget->Reserve(
          rows * table.row_bytes(),
          absl::StrCat(what, " would add ", rows, " rows to hash table '", table.name(), "'")));
    }
    bytes_ += rows * table.row_bytes();
    return absl::OkStatus();
  }

  // `rows` rows were added to `table`: their bytes become the store's.
  void Used(const HashTable& table, int64_t rows) {
    MemoryBudget* budget = store_->options_.memory_budget.get();
    if (budget == nullptr || rows == 0) return;
    const int64_t bytes = rows * table.row_bytes();
    store_->budget_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    // RowsToAdd bounds what a call adds, so this is never short; if it were,
    // the rows exist anyway and are counted.
    if (bytes > bytes_) budget->Charge(bytes - bytes_);
    bytes_ = std::max<int64_t>(0, bytes_ - bytes);
  }

 private:
  VariableStore* const store_;
  int64_t bytes_ = 0;  // reserved, not yet used
};

namespace {

// Sets `out` to a float32 tensor of `shape` and returns its (uninitialised)
// elements, to be written in place.
float* AllocateTensor(absl::Span<const int64_t> shape, TensorProto* out) {
  out->set_dtype(DT_FLOAT32);
  out->mutable_shape()->Assign(shape.begin(), shape.end());
  std::string* data = out->mutable_data();
  data->resize(static_cast<size_t>(NumElements(shape)) * sizeof(float));
  // The bytes of a std::string are suitably aligned for float (operator new).
  return reinterpret_cast<float*>(data->data());
}

}  // namespace

VariableStore::VariableStore(Options options)
    : options_(std::move(options)),
      incarnation_(
          absl::Uniform<uint64_t>(absl::BitGen(), 1, std::numeric_limits<uint64_t>::max())) {
  if (options_.registry) metrics_ = std::make_unique<Metrics>(*options_.registry);
}

VariableStore::~VariableStore() {
  if (options_.memory_budget) options_.memory_budget->Release(budget_bytes_.load());
}

absl::StatusOr<VariableStore::Variable*> VariableStore::Find(const std::string& name) {
  absl::ReaderMutexLock lock(&map_mu_);
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown variable '", name, "'"));
  }
  return it->second.get();
}

absl::StatusOr<std::vector<std::unique_ptr<VariableStore::Variable>>> VariableStore::NewVariables(
    const CreateVariablesRequest& request, bool allow_duplicates) {
  std::vector<std::unique_ptr<Variable>> out;
  absl::flat_hash_map<std::string, const VariableSpecProto*> in_request;
  for (const VariableSpecProto& spec : request.variables()) {
    ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                     ValidateSpec(spec, options_.max_variable_elements));
    auto [it, inserted] = in_request.emplace(spec.name(), &spec);
    if (!inserted) {
      if (!allow_duplicates || !CheckSameSpec(*it->second, spec).ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", spec.name(), "' appears twice in the request",
                         allow_duplicates ? " with different specs" : ""));
      }
      continue;
    }
    out.push_back(std::make_unique<Variable>(spec, std::move(optimizer)));
  }
  return out;
}

absl::Status VariableStore::InitializeVariables(std::vector<std::unique_ptr<Variable>>& vars) {
  for (auto& var : vars) {
    if (var == nullptr) continue;
    if (var->is_table()) {  // empty; rows are created on first touch
      HashTable::Options table;
      table.name = var->spec.name();
      table.dim = var->row_width;
      table.max_rows = var->spec.max_rows();
      table.eviction = var->spec.eviction();
      table.initializer = var->spec.initializer();
      table.optimizer = var->optimizer.get();
      if (metrics_) {
        table.evictions_counter = &metrics_->evictions.Add({{"variable", var->spec.name()}});
      }
      ASSIGN_OR_RETURN(var->table, HashTable::Create(std::move(table)));
      continue;
    }
    absl::MutexLock lock(&var->mu);
    var->values.resize(NumElements(var->shape));
    RunInitializer(var->spec.initializer(), var->spec.name(), var->shape,
                   absl::MakeSpan(var->values));
    var->slots = var->optimizer->NewSlots(static_cast<int64_t>(var->values.size()));
  }
  return absl::OkStatus();
}

absl::Status VariableStore::CreateVariables(const CreateVariablesRequest& request,
                                            CreateVariablesResponse* response) {
  absl::ReaderMutexLock state(&state_mu_);
  // 1. Validate every spec; drop exact duplicates within the request.
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Variable>> pending,
                   NewVariables(request, /*allow_duplicates=*/true));

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

  // 3. Reserve their bytes before allocating any, then initialise them.
  int64_t reserved = 0;
  for (const auto& var : pending) {
    if (var != nullptr) reserved += variable_store_internal::InitialBytes(*var);
  }
  // Whatever is not inserted below goes back to the budget.
  BudgetReservation reservation(options_.memory_budget.get());
  RETURN_IF_ERROR(reservation.Reserve(
      reserved, absl::StrCat("CreateVariables of job '", request.job(), "' (",
                             pending.size() - static_cast<size_t>(existing), " new variables)")));
  RETURN_IF_ERROR(InitializeVariables(pending));

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
    if (var == nullptr) continue;
    if (reservation.counted()) {
      const int64_t bytes = variable_store_internal::InitialBytes(*var);
      reservation.Take(bytes);
      budget_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    }
    variables_.emplace(var->spec.name(), std::move(var));
  }
  response->set_existing(existing);
  return absl::OkStatus();
}

absl::Status VariableStore::Pull(const PullRequest& request, PullResponse* response) {
  absl::ReaderMutexLock state(&state_mu_);
  if (metrics_) metrics_->pull_requests.Increment();
  RowReservation new_rows(this);
  ASSIGN_OR_RETURN(CheckedPull pull, CheckPull(request, &new_rows));
  ReadPull(pull, response, &new_rows);
  return absl::OkStatus();
}

absl::StatusOr<VariableStore::CheckedPull> VariableStore::CheckPull(const PullRequest& request,
                                                                    RowReservation* new_rows) {
  // Check everything before reading anything (a lookup creates rows).
  CheckedPull pull;
  pull.vars.reserve(request.names_size());
  for (const std::string& name : request.names()) {
    ASSIGN_OR_RETURN(Variable * var, Find(name));
    if (var->is_table()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable '", name, "' is a HASH_TABLE: read it by row (PullRequest.lookups)"));
    }
    pull.vars.push_back(var);
  }
  pull.lookups.reserve(request.lookups_size());
  int64_t elements = 0;
  for (const RowIds& lookup : request.lookups()) {
    ASSIGN_OR_RETURN(RowRequest r,
                     variable_store_internal::CheckRowIds(
                         [this](const std::string& name) ABSL_SHARED_LOCKS_REQUIRED(state_mu_) {
                           return Find(name);
                         },
                         lookup.name(), lookup.ids(), "lookup"));
    // Bound the response before allocating it: n ids of a wide row can ask
    // for far more than one message may carry.
    elements += static_cast<int64_t>(r.ids.size()) * r.var->row_width;
    if (elements > options_.max_variable_elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lookups of this request ask for more than ", options_.max_variable_elements,
          " elements (at lookup of variable '", lookup.name(), "', ", r.ids.size(), " ids)"));
    }
    if (r.var->is_table()) {
      RETURN_IF_ERROR(
          new_rows->Add(*r.var->table, r.ids, absl::StrCat("job '", request.job(), "': a lookup")));
    }
    pull.lookups.push_back(std::move(r));
  }
  return pull;
}

void VariableStore::ReadPull(const CheckedPull& pull, PullResponse* response,
                             RowReservation* new_rows) {
  const std::vector<Variable*>& vars = pull.vars;
  const std::vector<RowRequest>& lookups = pull.lookups;
  // Read first: every push counted here is in the values read below.
  response->set_version(push_version_.load(std::memory_order_acquire));
  int64_t bytes = 0;
  response->mutable_tensors()->Reserve(static_cast<int>(vars.size()));
  for (Variable* var : vars) {
    NamedTensor* out = response->add_tensors();
    out->set_name(var->spec.name());
    absl::ReaderMutexLock lock(&var->mu);
    EncodeTensor(var->shape, var->values, out->mutable_tensor());
    bytes += static_cast<int64_t>(out->tensor().data().size());
  }
  response->mutable_rows()->Reserve(static_cast<int>(lookups.size()));
  for (const RowRequest& r : lookups) {
    Variable* var = r.var;
    const int64_t n = static_cast<int64_t>(r.ids.size());
    const int64_t dim = var->row_width;
    NamedTensor* out = response->add_rows();
    out->set_name(var->spec.name());
    float* rows = AllocateTensor({n, dim}, out->mutable_tensor());
    if (var->is_table()) {
      new_rows->Used(*var->table,
                     var->table->Lookup(r.ids, absl::MakeSpan(rows, static_cast<size_t>(n * dim))));
    } else {
      absl::ReaderMutexLock lock(&var->mu);
      for (int64_t i = 0; i < n; ++i) {
        std::copy_n(var->values.data() + r.rows[i] * dim, dim, rows + i * dim);
      }
    }
    bytes += n * dim * static_cast<int64_t>(sizeof(float));
  }
  if (metrics_) metrics_->bytes_pulled.Increment(static_cast<double>(bytes));
}

absl::StatusOr<VariableStore::CheckedPush> VariableStore::CheckGradients(
    const PushRequest& request) {
  bool non_finite = false;
  absl::StatusOr<CheckedPush> checked = variable_store_internal::CheckGradients(
      request,
      [this](const std::string& name) ABSL_SHARED_LOCKS_REQUIRED(state_mu_) { return Find(name); },
      &non_finite);
  if (non_finite && metrics_) metrics_->rejected_non_finite.Increment();
  return checked;
}

absl::Status VariableStore::CheckPush(const PushRequest& request) {
  absl::ReaderMutexLock state(&state_mu_);
  return CheckGradients(request).status();
}

void VariableStore::CountDuplicate() {
  ledger_.CountDuplicate();
  if (metrics_) metrics_->duplicate_steps.Increment();
}

bool VariableStore::KeyApplied(int64_t closure_id, int64_t step) {
  return ledger_.Contains(closure_id, step);
}

absl::Status VariableStore::Push(const PushRequest& request, PushResponse* response) {
  if (metrics_) metrics_->push_requests.Increment();
  absl::ReaderMutexLock state(&state_mu_);
  if (request.has_update()) {
    RETURN_IF_ERROR(variable_store_internal::CheckUpdateKey(request.update()));
  }
  // The job's step this push belongs to, for learning-rate schedules; -1:
  // none given (the configured rate).
  const int64_t global_step = request.has_update() && request.update().has_global_step()
                                  ? request.update().global_step()
                                  : -1;
  // Check every gradient before applying any.
  ASSIGN_OR_RETURN(CheckedPush grads, CheckGradients(request));
  // Room for the hash-table rows this push (and its fused pull) may create.
  RowReservation new_rows(this);
  for (const auto& [r, grad] : grads.sparse) {
    if (!r.var->is_table()) continue;
    if (absl::Status s =
            new_rows.Add(*r.var->table, r.ids, absl::StrCat("job '", request.job(), "': a push"));
        !s.ok()) {
      if (metrics_) metrics_->rejected_memory.Increment();
      return s;
    }
  }
  std::optional<CheckedPull> pull;
  if (request.has_pull()) {
    if (metrics_) metrics_->pull_requests.Increment();
    absl::StatusOr<CheckedPull> checked = CheckPull(request.pull(), &new_rows);
    if (!checked.ok()) {
      if (metrics_ && absl::IsResourceExhausted(checked.status())) {
        metrics_->rejected_memory.Increment();
      }
      return checked.status();
    }
    pull = *std::move(checked);
  }

  // Everything is valid, so the apply below cannot fail: claim the key now.
  // The state lock keeps Save from seeing a claimed key before its apply.
  if (request.has_update()) {
    // False also for a closure below the pruning watermark.
    if (!ledger_.Claim(request.update().closure_id(), request.update().step())) {
      response->set_duplicate(true);
      if (metrics_) metrics_->duplicate_steps.Increment();
      if (pull.has_value()) ReadPull(*pull, response->mutable_pulled(), &new_rows);
      return absl::OkStatus();
    }
    if (metrics_) metrics_->applied_steps.Increment();
  }

  // Staleness: pushes finished between the step's pull and this one.
  float rate_scale = 1.0f;
  if (request.has_update() && request.update().has_pulled_version()) {
    const int64_t staleness = std::max<int64_t>(
        0, push_version_.load(std::memory_order_acquire) - request.update().pulled_version());
    response->set_staleness(staleness);
    if (metrics_) metrics_->push_staleness.Observe(static_cast<double>(staleness));
    rate_scale = Optimizer::StalenessRateScale(staleness);
  }
  // Whether a variable's optimizer scales its rate by the staleness.
  auto scale = [rate_scale](const Variable& var) {
    return var.optimizer->inverse_staleness_lr() ? rate_scale : 1.0f;
  };
  for (auto& [var, grad] : grads.dense) {
    absl::MutexLock lock(&var->mu);
    ++var->updates;
    var->optimizer->ApplyAt(global_step, var->updates, grad, absl::MakeSpan(var->values),
                            &var->slots, scale(*var));
  }
  for (auto& [r, grad] : grads.sparse) {
    Variable* var = r.var;
    absl::MutexLock lock(&var->mu);
    const int64_t step = ++var->updates;
    if (var->is_table()) {
      new_rows.Used(*var->table,
                    var->table->ApplyGradients(step, r.ids, grad, global_step, scale(*var)));
      continue;
    }
    std::vector<float*> slots;
    for (std::vector<float>& slot : var->slots) slots.push_back(slot.data());
    var->optimizer->ApplyRowsAt(global_step, step, var->row_width, r.rows, grad,
                                var->values.data(), slots, scale(*var));
  }
  push_version_.fetch_add(1, std::memory_order_acq_rel);
  const int64_t applied = static_cast<int64_t>(grads.dense.size() + grads.sparse.size());
  applied_updates_.fetch_add(applied, std::memory_order_relaxed);
  if (metrics_) {
    metrics_->applied_updates.Increment(static_cast<double>(applied));
    metrics_->bytes_pushed.Increment(static_cast<double>(grads.bytes));
  }
  if (pull.has_value()) ReadPull(*pull, response->mutable_pulled(), &new_rows);
  return absl::OkStatus();
}

absl::Status VariableStore::PruneKeys(const PruneKeysRequest& request,
                                      PruneKeysResponse* response) {
  absl::ReaderMutexLock state(&state_mu_);
  const AppliedUpdateLedger::Pruned pruned = ledger_.RetireBelow(request.below_closure_id());
  response->set_remaining(pruned.remaining);
  response->set_pruned(pruned.pruned);
  return absl::OkStatus();
}

absl::Status VariableStore::ReadTable(const std::string& name, std::vector<uint64_t>* keys,
                                      std::vector<float>* values) {
  absl::ReaderMutexLock state(&state_mu_);
  ASSIGN_OR_RETURN(Variable * var, Find(name));
  if (!var->is_table()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", name, "' is not a HASH_TABLE: pull it by name"));
  }
  var->table->ExportValues(keys, values);
  return absl::OkStatus();
}

absl::Status VariableStore::Stats(const StatsRequest& /*request*/, StatsResponse* response) {
  absl::ReaderMutexLock state(&state_mu_);
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
    s->set_kind(var->spec.kind());
    if (var->is_table()) {
      const HashTable::Stats t = var->table->GetStats();
      s->set_rows(t.rows);
      s->set_evictions(t.evictions);
      s->set_parameter_bytes(t.parameter_bytes);
      s->set_slot_bytes(t.slot_bytes);
    } else {
      s->set_rows(var->shape.empty() ? 0 : var->shape[0]);
    }
    absl::ReaderMutexLock lock(&var->mu);
    s->set_updates(var->updates);
    if (var->is_table()) continue;
    s->set_parameter_bytes(static_cast<int64_t>(var->values.size() * sizeof(float)));
    int64_t slot_bytes = 0;
    for (const auto& slot : var->slots)
      slot_bytes += static_cast<int64_t>(slot.size() * sizeof(float));
    s->set_slot_bytes(slot_bytes);
  }
  response->set_applied_updates(applied_updates_.load(std::memory_order_relaxed));
  response->set_incarnation(incarnation_);
  const AppliedUpdateLedger::Counts counts = ledger_.GetCounts();
  response->set_applied_steps(counts.applied_steps);
  response->set_duplicate_steps(counts.duplicate_steps);
  response->set_held_keys(counts.held_keys);
  return absl::OkStatus();
}

}  // namespace pscluster
