#include "ps/core/checkpoint_restore.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_file.h"
#include "common/model_variables.h"
#include "common/status_macros.h"
#include "common/tensor.h"
#include "ps/core/row_initializer.h"

namespace pscluster {
namespace variable_store_internal {
namespace {

absl::Status DataLoss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": ", what));
}

// Elements per row of a variable of `shape` (1 for a scalar or rank 1).
int64_t RowElements(const std::vector<int64_t>& shape) {
  return shape.size() <= 1 ? 1 : NumElements(absl::MakeConstSpan(shape).subspan(1));
}

int64_t LogicalRows(const std::vector<int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }

void CopyFloats(const std::string& bytes, int64_t first, int64_t n, float* out) {
  std::memcpy(out, bytes.data() + first * sizeof(float), static_cast<size_t>(n) * sizeof(float));
}

// The rows of `all` at `keep`, in that order.
HashTable::Rows Select(const HashTable::Rows& all, const std::vector<size_t>& keep, int64_t dim) {
  HashTable::Rows out;
  out.slots.resize(all.slots.size());
  const size_t d = static_cast<size_t>(dim);
  for (size_t i : keep) {
    out.ids.push_back(all.ids[i]);
    out.values.insert(out.values.end(), all.values.begin() + i * d,
                      all.values.begin() + (i + 1) * d);
    for (size_t k = 0; k < all.slots.size(); ++k) {
      out.slots[k].insert(out.slots[k].end(), all.slots[k].begin() + i * d,
                          all.slots[k].begin() + (i + 1) * d);
    }
    out.touches.push_back(all.touches[i]);
    out.ages.push_back(all.ages[i]);
  }
  return out;
}

}  // namespace

absl::Status RestoreTargets::Add(Variable* var) {
  const std::string& name = var->spec.name();
  if (var->is_table()) {
    const std::string logical = LogicalTableName(name);
    int shard = -1;
    if (logical == name ||
        !absl::SimpleAtoi(name.substr(logical.size() + 6), &shard) || shard >= num_ps_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "restore: hash table '", name, "' must be named '<table>/part_<i>' with i in [0, ",
          num_ps_, ")"));
    }
    Logical& l = logical_[logical];
    if (!l.dense.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("restore: '", logical, "' is both a DENSE variable and a HASH_TABLE"));
    }
    l.is_table = true;
    l.tables[shard] = TableTarget{var, {}};
    l.tables[shard].rows.slots.resize(var->optimizer->SlotNames().size());
    return absl::OkStatus();
  }
  const bool shard = var->spec.full_shape_size() > 0;
  const std::string logical = shard ? LogicalTableName(name) : name;
  const std::vector<int64_t> full =
      shard ? std::vector<int64_t>(var->spec.full_shape().begin(), var->spec.full_shape().end())
            : var->shape;
  auto [it, inserted] = logical_.try_emplace(logical);
  Logical& l = it->second;
  if (l.is_table || (!inserted && l.full_shape != full)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "restore: shards of '", logical, "' disagree on its kind or shape (", name, ")"));
  }
  l.full_shape = full;
  l.dense.push_back(DenseTarget{var, var->spec.row_offset(), LogicalRows(var->shape),
                                RowElements(var->shape), {}});
  return absl::OkStatus();
}

absl::Status RestoreTargets::CheckOptimizer(const std::string& name, const std::string& saved_type,
                                            int saved_slots, const Variable& var) {
  const int slots = static_cast<int>(var.optimizer->SlotNames().size());
  if (saved_type != var.spec.optimizer().type() || saved_slots != slots) {
    return absl::FailedPreconditionError(absl::StrCat(
        "restore: variable '", name, "' was saved with optimizer '", saved_type, "' (",
        saved_slots, " slots) and is restored with '", var.spec.optimizer().type(), "' (", slots,
        " slots)"));
  }
  return absl::OkStatus();
}

absl::Status RestoreTargets::ReadDense(const std::string& path, const DenseSlice& slice) {
  const std::vector<int64_t> full(slice.full_shape().begin(), slice.full_shape().end());
  // Bound every count so the products below cannot overflow.
  if (slice.name().empty() || !ValidateShape(full, int64_t{1} << 40).ok() || slice.rows() < 0 ||
      slice.row_offset() < 0 || slice.row_offset() > LogicalRows(full) - slice.rows()) {
    return DataLoss(path, absl::StrCat("bad dense slice of '", slice.name(), "'"));
  }
  const int64_t row_elements = RowElements(full);
  const size_t bytes = static_cast<size_t>(slice.rows() * row_elements) * sizeof(float);
  bool sizes_ok = slice.values().size() == bytes;
  for (const std::string& slot : slice.slots()) sizes_ok = sizes_ok && slot.size() == bytes;
  if (!sizes_ok) {
    return DataLoss(path, absl::StrCat("dense slice of '", slice.name(), "' has ",
                                       slice.values().size(), " value bytes, expected ", bytes));
  }
  auto it = logical_.find(slice.name());
  if (it == logical_.end()) return absl::OkStatus();  // not in the new layout
  Logical& l = it->second;
  if (l.is_table || l.full_shape != full) {
    return absl::FailedPreconditionError(absl::StrCat(
        "restore: variable '", slice.name(), "' was saved as DENSE ", ShapeString(full),
        l.is_table ? ", is restored as a HASH_TABLE"
                   : absl::StrCat(", is restored with shape ", ShapeString(l.full_shape))));
  }
  for (DenseTarget& t : l.dense) {
    RETURN_IF_ERROR(
        CheckOptimizer(slice.name(), slice.optimizer_type(), slice.slots_size(), *t.var));
  }
  l.saved = true;
  l.updates = std::max(l.updates, slice.updates());
  for (DenseTarget& t : l.dense) {
    const int64_t lo = std::max(slice.row_offset(), t.row_offset);
    const int64_t hi = std::min(slice.row_offset() + slice.rows(), t.row_offset + t.rows);
    if (lo >= hi) continue;
    const int64_t from = (lo - slice.row_offset()) * row_elements;
    const int64_t to = (lo - t.row_offset) * row_elements;
    const int64_t n = (hi - lo) * row_elements;
    absl::MutexLock lock(&t.var->mu);
    CopyFloats(slice.values(), from, n, t.var->values.data() + to);
    for (int k = 0; k < slice.slots_size(); ++k) {
      CopyFloats(slice.slots(k), from, n, t.var->slots[k].data() + to);
    }
    t.covered.emplace_back(lo, hi);
  }
  return absl::OkStatus();
}

absl::Status RestoreTargets::ReadTable(const std::string& path, const HashTableChunk& chunk) {
  const int64_t dim = chunk.dim();
  const size_t n = chunk.ids().size() / 8;
  bool ok = !chunk.name().empty() && dim >= 1 && dim <= (int64_t{1} << 28) &&
            chunk.ids().size() % 8 == 0 && chunk.touches_size() == static_cast<int>(n) &&
            chunk.ages_size() == static_cast<int>(n);
  const size_t bytes = n * static_cast<size_t>(dim) * sizeof(float);
  ok = ok && chunk.values().size() == bytes;
  for (const std::string& slot : chunk.slots()) ok = ok && slot.size() == bytes;
  if (!ok) return DataLoss(path, absl::StrCat("bad hash-table chunk of '", chunk.name(), "'"));
  auto it = logical_.find(chunk.name());
  if (it == logical_.end()) return absl::OkStatus();
  Logical& l = it->second;
  if (!l.is_table) {
    return absl::FailedPreconditionError(absl::StrCat(
        "restore: variable '", chunk.name(), "' was saved as a HASH_TABLE, is restored as DENSE"));
  }
  for (auto& [shard, t] : l.tables) {
    if (t.var->row_width != dim) {
      return absl::FailedPreconditionError(
          absl::StrCat("restore: hash table '", chunk.name(), "' was saved with rows of ", dim,
                       " and is restored with rows of ", t.var->row_width));
    }
    RETURN_IF_ERROR(
        CheckOptimizer(chunk.name(), chunk.optimizer_type(), chunk.slots_size(), *t.var));
  }
  l.saved = true;
  l.updates = std::max(l.updates, chunk.updates());
  const size_t d = static_cast<size_t>(dim);
  for (size_t i = 0; i < n; ++i) {
    uint64_t id;
    std::memcpy(&id, chunk.ids().data() + 8 * i, 8);
    auto target = l.tables.find(HashTableShard(id, num_ps_));
    if (target == l.tables.end()) continue;  // another PS's row
    HashTable::Rows& rows = target->second.rows;
    rows.ids.push_back(id);
    const size_t at = rows.values.size();
    rows.values.resize(at + d);
    CopyFloats(chunk.values(), static_cast<int64_t>(i * d), dim, rows.values.data() + at);
    for (int k = 0; k < chunk.slots_size(); ++k) {
      rows.slots[k].resize(at + d);
      CopyFloats(chunk.slots(k), static_cast<int64_t>(i * d), dim, rows.slots[k].data() + at);
    }
    rows.touches.push_back(chunk.touches(static_cast<int>(i)));
    rows.ages.push_back(chunk.ages(static_cast<int>(i)));
  }
  return absl::OkStatus();
}

absl::Status RestoreTargets::ReadFile(const std::string& path, SavedLedgers* saved) {
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointFileReader> reader, CheckpointFileReader::Open(path));
  std::string bytes;
  ASSIGN_OR_RETURN(bool more, reader->Next(&bytes));
  CheckpointDataHeader header;
  if (!more || !header.ParseFromString(bytes)) return DataLoss(path, "no valid header record");
  if (header.format_version() != kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint file ", path, ": format version ", header.format_version(),
                     ", this PS reads version ", kCheckpointFormatVersion));
  }
  bool keys_seen = false;
  for (int64_t index = 1;; ++index) {
    ASSIGN_OR_RETURN(more, reader->Next(&bytes));
    if (!more) break;
    CheckpointDataRecord record;
    if (!record.ParseFromString(bytes) || keys_seen) {
      return DataLoss(path, absl::StrCat("record ", index, keys_seen ? " follows the applied keys"
                                                                     : " is malformed"));
    }
    switch (record.record_case()) {
      case CheckpointDataRecord::kDense:
        RETURN_IF_ERROR(ReadDense(path, record.dense()));
        break;
      case CheckpointDataRecord::kHashTable:
        RETURN_IF_ERROR(ReadTable(path, record.hash_table()));
        break;
      case CheckpointDataRecord::kAppliedKeys:
        if (absl::Status s = saved->Add(header.ps_index(), record.applied_keys()); !s.ok()) {
          return DataLoss(path, absl::StrCat("applied keys: ", s.message()));
        }
        keys_seen = true;
        break;
      default:
        return DataLoss(path, absl::StrCat("record ", index, " is empty or of an unknown kind"));
    }
  }
  if (!keys_seen) return DataLoss(path, "no applied-keys record at the end");
  return absl::OkStatus();
}

absl::StatusOr<int64_t> RestoreTargets::Finish() {
  // By name, so the error reported first does not depend on hashing.
  std::vector<std::pair<const std::string*, Logical*>> sorted;
  for (auto& [name, l] : logical_) sorted.emplace_back(&name, &l);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  for (auto [name, l] : sorted) {
    if (!l->saved) {
      return absl::FailedPreconditionError(
          absl::StrCat("restore: variable '", *name, "' is not in the checkpoint"));
    }
  }
  int64_t restored = 0;
  for (auto [name_ptr, l_ptr] : sorted) {
    const std::string& name = *name_ptr;
    Logical& l = *l_ptr;
    for (DenseTarget& t : l.dense) {
      std::sort(t.covered.begin(), t.covered.end());
      int64_t next = t.row_offset;  // first row not yet covered
      for (const auto& [lo, hi] : t.covered) {
        if (lo > next) break;
        next = std::max(next, hi);
      }
      if (next < t.row_offset + t.rows) {
        return absl::DataLossError(absl::StrCat("restore: the saved slices of '", name,
                                                "' do not cover row ", next));
      }
      absl::MutexLock lock(&t.var->mu);
      t.var->updates = l.updates;
      restored += t.rows;
    }
    for (auto& [shard, t] : l.tables) {
      HashTable::Rows& rows = t.rows;
      const int64_t max_rows = t.var->spec.max_rows() > 0 ? t.var->spec.max_rows()
                                                          : HashTable::kMaxRows;
      int64_t evicted = 0;
      if (static_cast<int64_t>(rows.ids.size()) > max_rows) {
        // Keep the rows the table's policy would evict last.
        std::vector<size_t> order(rows.ids.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        const bool lfu = t.var->spec.eviction() == LFU;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          if (lfu && rows.touches[a] != rows.touches[b]) return rows.touches[a] > rows.touches[b];
          return rows.ages[a] < rows.ages[b];
        });
        order.resize(static_cast<size_t>(max_rows));
        evicted = static_cast<int64_t>(rows.ids.size()) - max_rows;
        rows = Select(rows, order, t.var->row_width);
      }
      const int64_t n = static_cast<int64_t>(rows.ids.size());
      if (absl::Status s = t.var->table->Load(std::move(rows), evicted); !s.ok()) {
        // Load's only input error left is a repeated id.
        return absl::DataLossError(absl::StrCat("restore: ", s.message()));
      }
      absl::MutexLock lock(&t.var->mu);
      t.var->updates = l.updates;
      restored += n;
    }
  }
  return restored;
}

}  // namespace variable_store_internal
}  // namespace pscluster
