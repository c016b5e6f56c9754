#include "ps/core/hash_table.h"

#include <prometheus/counter.h>
#include <xxhash.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// Ids ahead whose hash-map slot is prefetched: ids are scattered over a
// large map, so each find would otherwise wait on memory.
constexpr size_t kPrefetchIdsAhead = 8;

std::vector<float> SlotInitialValues(const Optimizer& optimizer) {
  std::vector<float> values;
  const size_t n = optimizer.SlotNames().size();
  for (size_t i = 0; i < n; ++i) values.push_back(optimizer.SlotInitialValue(static_cast<int>(i)));
  return values;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HashTable>> HashTable::Create(Options options) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("hash table '", options.name, "': ", what));
  };
  if (options.dim < 1) return fail(absl::StrCat("row width must be >= 1, got ", options.dim));
  if (options.max_rows < 0 || options.max_rows > kMaxRows) {
    return fail(absl::StrCat("max_rows must be in [0, ", kMaxRows, "], got ", options.max_rows));
  }
  if (options.eviction_samples < 1) {
    return fail(absl::StrCat("eviction_samples must be >= 1, got ", options.eviction_samples));
  }
  return std::unique_ptr<HashTable>(new HashTable(std::move(options)));
}

HashTable::HashTable(Options options)
    : options_(std::move(options)),
      capacity_(options_.max_rows > 0 ? options_.max_rows : kMaxRows),
      initializer_(options_.initializer, options_.name, options_.dim),
      slot_initial_values_(SlotInitialValues(*options_.optimizer)),
      slots_(slot_initial_values_.size()),
      rng_state_(XXH3_64bits(options_.name.data(), options_.name.size())) {}

uint64_t HashTable::NextRandom() {
  // splitmix64; only picks eviction samples.
  uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint32_t HashTable::AppendRow() {
  const size_t rows = ids_.size();
  const size_t dim = static_cast<size_t>(options_.dim);
  if (rows == ids_.capacity()) {
    // Grow geometrically but never past the bound, so a full table holds no
    // spare capacity.
    const size_t want =
        std::min<size_t>(static_cast<size_t>(capacity_), std::max<size_t>(16, 2 * rows));
    ids_.reserve(want);
    touches_.reserve(want);
    last_touch_.reserve(want);
    values_.reserve(want * dim);
    for (std::vector<float>& slot : slots_) slot.reserve(want * dim);
  }
  ids_.push_back(0);
  touches_.push_back(0);
  last_touch_.push_back(0);
  values_.resize((rows + 1) * dim);
  for (std::vector<float>& slot : slots_) slot.resize((rows + 1) * dim);
  return static_cast<uint32_t>(rows);
}

uint32_t HashTable::PickVictim(uint64_t tick) {
  const uint64_t rows = ids_.size();
  uint32_t victim = 0;
  // Lower is evicted first: rows of the current call last, then by policy.
  std::tuple<bool, uint64_t, uint64_t> worst{true, std::numeric_limits<uint64_t>::max(),
                                             std::numeric_limits<uint64_t>::max()};
  for (int i = 0; i < options_.eviction_samples; ++i) {
    const uint32_t s = static_cast<uint32_t>(NextRandom() % rows);
    const bool current = last_touch_[s] == tick;
    const auto key = options_.eviction == AGE
                         ? std::make_tuple(current, last_touch_[s], uint64_t{0})
                         : std::make_tuple(current, uint64_t{touches_[s]}, last_touch_[s]);
    if (i == 0 || key < worst) {
      worst = key;
      victim = s;
    }
  }
  return victim;
}

uint32_t HashTable::Touch(uint64_t id, uint64_t tick,
                          absl::FunctionRef<void()> before_evicting_current) {
  auto it = slot_of_.find(id);
  if (it != slot_of_.end()) {
    const uint32_t s = it->second;
    if (touches_[s] != std::numeric_limits<uint32_t>::max()) ++touches_[s];
    last_touch_[s] = tick;
    return s;
  }
  uint32_t s;
  if (static_cast<int64_t>(ids_.size()) < capacity_) {
    s = AppendRow();
  } else {
    s = PickVictim(tick);
    if (last_touch_[s] == tick) before_evicting_current();
    slot_of_.erase(ids_[s]);
    ++evictions_;
    if (options_.evictions_counter != nullptr) options_.evictions_counter->Increment();
  }
  slot_of_.emplace(id, s);
  ids_[s] = id;
  touches_[s] = 1;
  last_touch_[s] = tick;
  const size_t dim = static_cast<size_t>(options_.dim);
  initializer_.Fill(id, absl::MakeSpan(values_.data() + s * dim, dim));
  for (size_t k = 0; k < slots_.size(); ++k) {
    std::fill_n(slots_[k].data() + s * dim, dim, slot_initial_values_[k]);
  }
  return s;
}

int64_t HashTable::FreeRows() const {
  absl::ReaderMutexLock lock(&mu_);
  return capacity_ - static_cast<int64_t>(ids_.size());
}

int64_t HashTable::RowsToAdd(absl::Span<const uint64_t> ids) const {
  absl::ReaderMutexLock lock(&mu_);
  const int64_t free_rows = capacity_ - static_cast<int64_t>(ids_.size());
  if (free_rows == 0) return 0;
  absl::flat_hash_set<uint64_t> missing;
  for (uint64_t id : ids) {
    if (!slot_of_.contains(id)) missing.insert(id);
  }
  return std::min(free_rows, static_cast<int64_t>(missing.size()));
}

int64_t HashTable::Lookup(absl::Span<const uint64_t> ids, absl::Span<float> out) {
  const size_t dim = static_cast<size_t>(options_.dim);
  absl::MutexLock lock(&mu_);
  const size_t rows_before = ids_.size();
  const uint64_t tick = ++clock_;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kPrefetchIdsAhead < ids.size()) slot_of_.prefetch(ids[i + kPrefetchIdsAhead]);
    // Copied at once: a later id of this call may evict the row.
    const uint32_t s = Touch(ids[i], tick, [] {});
    std::copy_n(values_.data() + s * dim, dim, out.data() + i * dim);
  }
  return static_cast<int64_t>(ids_.size() - rows_before);
}

int64_t HashTable::ApplyGradients(int64_t step, absl::Span<const uint64_t> ids,
                                  absl::Span<const float> grads, int64_t global_step,
                                  float rate_scale) {
  const int64_t dim = options_.dim;
  absl::MutexLock lock(&mu_);
  const size_t rows_before = ids_.size();
  const uint64_t tick = ++clock_;
  // Rows are resolved first and updated in batches; a batch is applied early
  // if one of its rows is about to be evicted by a later id of this call.
  std::vector<int64_t> pending;
  pending.reserve(ids.size());
  size_t first = 0;  // index in `ids` of pending[0]
  std::vector<float*> slot_data(slots_.size());
  auto flush = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (pending.empty()) return;
    for (size_t k = 0; k < slots_.size(); ++k) slot_data[k] = slots_[k].data();
    options_.optimizer->ApplyRowsAt(global_step, step, dim, pending,
                                  grads.subspan(first * dim, pending.size() * dim), values_.data(),
                                  slot_data, rate_scale);
    first += pending.size();
    pending.clear();
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kPrefetchIdsAhead < ids.size()) slot_of_.prefetch(ids[i + kPrefetchIdsAhead]);
    pending.push_back(Touch(ids[i], tick, flush));
  }
  flush();
  return static_cast<int64_t>(ids_.size() - rows_before);
}

bool HashTable::Contains(uint64_t id) const {
  absl::ReaderMutexLock lock(&mu_);
  return slot_of_.contains(id);
}

HashTable::Rows HashTable::ExportRows(int64_t first, int64_t count) const {
  absl::ReaderMutexLock lock(&mu_);
  const size_t held = ids_.size();
  const size_t begin = std::min(held, static_cast<size_t>(std::max<int64_t>(first, 0)));
  const size_t end = std::min(held, begin + static_cast<size_t>(std::max<int64_t>(count, 0)));
  const size_t dim = static_cast<size_t>(options_.dim);
  Rows out;
  out.ids.assign(ids_.begin() + begin, ids_.begin() + end);
  out.values.assign(values_.begin() + begin * dim, values_.begin() + end * dim);
  for (const std::vector<float>& slot : slots_) {
    out.slots.emplace_back(slot.begin() + begin * dim, slot.begin() + end * dim);
  }
  out.touches.assign(touches_.begin() + begin, touches_.begin() + end);
  for (size_t s = begin; s < end; ++s) out.ages.push_back(clock_ - last_touch_[s]);
  return out;
}

void HashTable::ExportValues(std::vector<uint64_t>* ids, std::vector<float>* values) const {
  absl::ReaderMutexLock lock(&mu_);
  ids->assign(ids_.begin(), ids_.end());
  values->assign(values_.begin(), values_.begin() + ids_.size() * options_.dim);
}

absl::Status HashTable::Load(Rows rows, int64_t evicted) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("hash table '", options_.name, "': ", what));
  };
  const size_t n = rows.ids.size();
  const size_t dim = static_cast<size_t>(options_.dim);
  // One slot array per optimizer slot (slots_ has as many, for ever).
  if (rows.values.size() != n * dim || rows.slots.size() != slot_initial_values_.size() ||
      rows.touches.size() != n || rows.ages.size() != n) {
    return fail("rows to load have mismatched sizes");
  }
  for (const std::vector<float>& slot : rows.slots) {
    if (slot.size() != n * dim) return fail("slot rows to load have mismatched sizes");
  }
  if (static_cast<int64_t>(n) > capacity_) {
    return fail(absl::StrCat(n, " rows to load, more than max_rows ", capacity_));
  }
  absl::MutexLock lock(&mu_);
  if (!ids_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("hash table '", options_.name, "': load into a table that holds rows"));
  }
  absl::flat_hash_map<uint64_t, uint32_t> slot_of;
  slot_of.reserve(n);
  uint64_t oldest = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!slot_of.emplace(rows.ids[i], static_cast<uint32_t>(i)).second) {
      return fail(absl::StrCat("id ", rows.ids[i], " appears more than once in the rows to load"));
    }
    oldest = std::max(oldest, rows.ages[i]);
  }
  slot_of_ = std::move(slot_of);
  clock_ = oldest;
  last_touch_.resize(n);
  for (size_t i = 0; i < n; ++i) last_touch_[i] = clock_ - rows.ages[i];
  ids_ = std::move(rows.ids);
  values_ = std::move(rows.values);
  slots_ = std::move(rows.slots);
  touches_ = std::move(rows.touches);
  evictions_ += evicted;
  if (options_.evictions_counter != nullptr && evicted > 0) {
    options_.evictions_counter->Increment(static_cast<double>(evicted));
  }
  return absl::OkStatus();
}

HashTable::Stats HashTable::GetStats() const {
  absl::ReaderMutexLock lock(&mu_);
  Stats s;
  s.rows = static_cast<int64_t>(ids_.size());
  s.evictions = evictions_;
  s.parameter_bytes = s.rows * options_.dim * static_cast<int64_t>(sizeof(float));
  s.slot_bytes = s.parameter_bytes * static_cast<int64_t>(slots_.size());
  return s;
}

}  // namespace pscluster
