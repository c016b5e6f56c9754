// VariableStore::Save and VariableStore::Restore: a PS's variables as slices
// of their logical variables in a checkpoint data file, and back into any
// layout. Format: docs/checkpoint_format.md.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_file.h"
#include "common/confined_path.h"
#include "common/model_variables.h"
#include "common/status_macros.h"
#include "protos/checkpoint_data.pb.h"
#include "ps/core/applied_update_ledger.h"
#include "ps/core/checkpoint_restore.h"
#include "ps/core/memory_budget.h"
#include "ps/core/row_initializer.h"
#include "ps/core/variable_store.h"
#include "ps/core/variable_store_internal.h"

namespace pscluster {
namespace {

using variable_store_internal::kCheckpointFormatVersion;
using variable_store_internal::RestoreTargets;
using variable_store_internal::Variable;

// Payload bytes per record, roughly: large slices are split by rows.
constexpr int64_t kChunkBytes = int64_t{64} << 20;

std::string FloatBytes(const float* data, int64_t n) {
  return std::string(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * sizeof(float));
}

absl::Status AppendRecord(CheckpointFileWriter& writer, const CheckpointDataRecord& record) {
  return writer.Append(record.SerializeAsString());
}

// Writes a DENSE variable or shard as slices of its logical variable, at most
// ~kChunkBytes each. REQUIRES: var.mu held.
absl::Status SaveDense(const Variable& var, int64_t updates,
                       const std::vector<float>& values, const OptimizerSlots& slots,
                       CheckpointFileWriter& writer) {
  const bool shard = var.spec.full_shape_size() > 0;
  const Shape full = shard ? Shape(var.spec.full_shape().begin(), var.spec.full_shape().end())
                           : var.shape;
  const int64_t rows = var.shape.empty() ? 1 : var.shape[0];
  const int64_t row_elements =
      var.shape.empty() ? 1 : NumElements(var.shape) / std::max<int64_t>(rows, 1);
  const int64_t row_bytes =
      std::max<int64_t>(1, row_elements * 4 * (1 + static_cast<int64_t>(slots.size())));
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / row_bytes);
  int64_t first = 0;
  do {
    const int64_t n = std::min(chunk_rows, rows - first);
    CheckpointDataRecord record;
    DenseSlice* slice = record.mutable_dense();
    slice->set_name(shard ? LogicalTableName(var.spec.name()) : var.spec.name());
    slice->mutable_full_shape()->Assign(full.begin(), full.end());
    slice->set_row_offset(var.spec.row_offset() + first);
    slice->set_rows(n);
    slice->set_optimizer_type(var.spec.optimizer().type());
    slice->set_updates(updates);
    slice->set_values(FloatBytes(values.data() + first * row_elements, n * row_elements));
    for (const std::vector<float>& slot : slots) {
      slice->add_slots(FloatBytes(slot.data() + first * row_elements, n * row_elements));
    }
    RETURN_IF_ERROR(AppendRecord(writer, record));
    first += n;
  } while (first < rows);
  return absl::OkStatus();
}

// Writes a HASH_TABLE shard's rows in chunks of ~kChunkBytes (one empty
// chunk for an empty table, so the variable is in the checkpoint).
absl::Status SaveTable(const Variable& var, int64_t updates,
                       CheckpointFileWriter& writer) {
  const int64_t dim = var.row_width;
  const int64_t slots = static_cast<int64_t>(var.optimizer->SlotNames().size());
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / (dim * 4 * (1 + slots) + 20));
  const int64_t rows = var.table->GetStats().rows;
  int64_t first = 0;
  do {
    HashTable::Rows r = var.table->ExportRows(first, chunk_rows);
    CheckpointDataRecord record;
    HashTableChunk* chunk = record.mutable_hash_table();
    chunk->set_name(LogicalTableName(var.spec.name()));
    chunk->set_dim(dim);
    chunk->set_optimizer_type(var.spec.optimizer().type());
    chunk->set_updates(updates);
    chunk->set_ids(std::string(reinterpret_cast<const char*>(r.ids.data()), r.ids.size() * 8));
    chunk->set_values(FloatBytes(r.values.data(), static_cast<int64_t>(r.values.size())));
    for (const std::vector<float>& slot : r.slots) {
      chunk->add_slots(FloatBytes(slot.data(), static_cast<int64_t>(slot.size())));
    }
    chunk->mutable_touches()->Assign(r.touches.begin(), r.touches.end());
    chunk->mutable_ages()->Assign(r.ages.begin(), r.ages.end());
    RETURN_IF_ERROR(AppendRecord(writer, record));
    first += static_cast<int64_t>(r.ids.size());
  } while (first < rows);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> VariableStore::CheckpointPath(const std::string& name) const {
  ASSIGN_OR_RETURN(std::string path,
                   ResolveCheckpointName(options_.checkpoint_root, "--checkpoint_root", name));
  // Only data files: a Save never overwrites a MANIFEST or a job log.
  if (!absl::EndsWith(path, ".data")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint name '", name, "' does not name a data file (\"*.data\", e.g. ps-0.data)"));
  }
  return path;
}

absl::Status VariableStore::Save(const SaveRequest& request, SaveResponse* response) {
  // Exclusive: no push or lookup runs while the snapshot is written.
  ASSIGN_OR_RETURN(const std::string path, CheckpointPath(request.name()));
  absl::WriterMutexLock state(&state_mu_);
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointFileWriter> writer,
                   CheckpointFileWriter::Create(path, CheckpointFileWriter::Existing::kRefuse));
  CheckpointDataHeader header;
  header.set_format_version(kCheckpointFormatVersion);
  header.set_ps_index(request.ps_index());
  RETURN_IF_ERROR(writer->Append(header.SerializeAsString()));

  std::vector<Variable*> vars;
  {
    absl::ReaderMutexLock lock(&map_mu_);
    for (auto& [name, var] : variables_) vars.push_back(var.get());
  }
  std::sort(vars.begin(), vars.end(),
            [](const Variable* a, const Variable* b) { return a->spec.name() < b->spec.name(); });
  for (Variable* var : vars) {
    absl::ReaderMutexLock lock(&var->mu);
    if (var->is_table()) {
      RETURN_IF_ERROR(SaveTable(*var, var->updates, *writer));
    } else {
      RETURN_IF_ERROR(SaveDense(*var, var->updates, var->values, var->slots, *writer));
    }
  }

  CheckpointDataRecord keys;
  *keys.mutable_applied_keys() = ledger_.ToProto();
  RETURN_IF_ERROR(AppendRecord(*writer, keys));
  ASSIGN_OR_RETURN(CheckpointFile file, writer->Commit());
  response->set_name(request.name());
  response->set_bytes(file.bytes());
  response->set_checksum(file.checksum());
  response->set_variables(static_cast<int64_t>(vars.size()));
  return absl::OkStatus();
}

absl::Status VariableStore::Restore(const RestoreRequest& request, RestoreResponse* response) {
  if (request.num_ps() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("restore: num_ps must be >= 1, got ", request.num_ps()));
  }
  // Every name is checked before any file is opened.
  std::vector<std::string> paths;
  for (const CheckpointFile& file : request.files()) {
    ASSIGN_OR_RETURN(std::string path, CheckpointPath(file.name()));
    paths.push_back(std::move(path));
  }
  // 1. The new variables, validated and initialised aside.
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Variable>> vars,
                   NewVariables(request.variables(), /*allow_duplicates=*/false));
  // Their bytes are reserved before they are allocated; what this store
  // holds now counts as freed (the swap below frees it). Given back on error.
  const int64_t replaced = budget_bytes_.load();
  BudgetReservation reservation(options_.memory_budget.get());
  if (reservation.counted()) {
    int64_t bytes = 0;
    for (const auto& var : vars) bytes += variable_store_internal::InitialBytes(*var);
    RETURN_IF_ERROR(reservation.Reserve(
        bytes, absl::StrCat("Restore of job '", request.job(), "' (", vars.size(), " variables)"),
        /*credit=*/replaced));
  }
  RETURN_IF_ERROR(InitializeVariables(vars));
  RestoreTargets targets(request.num_ps());
  for (auto& var : vars) RETURN_IF_ERROR(targets.Add(var.get()));

  // 2. Verify every file, then fill the targets from all of them.
  for (int i = 0; i < request.files_size(); ++i) {
    RETURN_IF_ERROR(VerifyCheckpointFile(paths[i], request.files(i)));
  }
  SavedLedgers saved;
  for (const std::string& path : paths) RETURN_IF_ERROR(targets.ReadFile(path, &saved));
  // Keys: the union of the files'; step counters: those of the file this PS
  // index saved, else the highest (SavedLedgers::Merged).
  AppliedUpdateLedger::State ledger = std::move(saved).Merged(request.ps_index());
  ASSIGN_OR_RETURN(const int64_t rows, targets.Finish());
  if (reservation.counted()) {
    int64_t table_rows = 0, bytes = 0;
    for (const auto& var : vars) {
      if (!var->is_table()) continue;
      const int64_t n = var->table->GetStats().rows;
      table_rows += n;
      bytes += n * var->table->row_bytes();
    }
    RETURN_IF_ERROR(reservation.Reserve(bytes,
                                        absl::StrCat("Restore of job '", request.job(), "': ",
                                                     table_rows, " rows of its hash tables"),
                                        /*credit=*/replaced));
  }

  // 3. Swap the new state in.
  VariableMap map;
  for (auto& var : vars) {
    const std::string name = var->spec.name();
    map.emplace(name, std::move(var));
  }
  {
    absl::WriterMutexLock state(&state_mu_);
    {
      absl::MutexLock lock(&map_mu_);
      variables_.swap(map);
    }
    ledger_.Replace(std::move(ledger));
    // The new state is charged to this store; the old one's bytes go back
    // (the reservation releases them).
    if (reservation.counted()) {
      const int64_t restored = reservation.bytes();
      reservation.Take(restored);
      reservation.Adopt(budget_bytes_.exchange(restored));
    }
  }
  // The old variables are destroyed here, outside every lock.
  response->set_variables(static_cast<int64_t>(request.variables().variables_size()));
  response->set_rows(rows);
  return absl::OkStatus();
}

}  // namespace pscluster
