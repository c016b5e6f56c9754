// MemoryBudget: the bytes a PS task may hold for all its jobs together
// (ps_server --max_memory_bytes), and what it holds now.
//
// What counts is what StatsResponse.held_bytes reports: parameter plus
// optimizer-slot bytes of every variable, hash-table rows included
// (rows * dim * 4 * (1 + slots)). Stores reserve bytes before they allocate
// them — variables at CreateVariables and Restore, hash-table rows before a
// push or lookup that may create them — and release them when freed, so a
// request that would pass the limit is refused before anything of it is
// applied. Besides, the raw data plane (ps/service/data_plane_server.h)
// reserves the request buffers its connections grow and keep, so held() may
// exceed held_bytes by those. Bookkeeping the budget does not count: gRPC's
// message buffers, answers, hash-map entries and the spare capacity of
// growing hash-table arenas.
//
// Thread-safe (one atomic counter).
#ifndef PSCLUSTER_PS_CORE_MEMORY_BUDGET_H_
#define PSCLUSTER_PS_CORE_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pscluster {

class MemoryBudget {
 public:
  // `limit_bytes` <= 0 means unlimited (bytes are still counted).
  explicit MemoryBudget(int64_t limit_bytes) : limit_(limit_bytes > 0 ? limit_bytes : 0) {}

  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // The limit; 0 when unlimited.
  int64_t limit() const { return limit_; }
  // Bytes reserved now, over all jobs.
  int64_t held() const { return held_.load(std::memory_order_relaxed); }

  // Adds `bytes` to what is held if held - credit + bytes <= limit (always
  // when unlimited); `credit` is bytes held now that the caller is about to
  // free (a restore replacing a job's state). REQUIRES: bytes, credit >= 0.
  bool TryReserve(int64_t bytes, int64_t credit = 0);

  // As TryReserve; RESOURCE_EXHAUSTED when refused, the message starting
  // with `what` and naming the bytes requested, held and the limit.
  absl::Status Reserve(int64_t bytes, absl::string_view what, int64_t credit = 0);

  // Counts `bytes` already allocated, whatever the limit. REQUIRES: bytes >= 0.
  void Charge(int64_t bytes) { held_.fetch_add(bytes, std::memory_order_relaxed); }

  // Gives back bytes reserved before. REQUIRES: 0 <= bytes <= held().
  void Release(int64_t bytes);

 private:
  const int64_t limit_;
  std::atomic<int64_t> held_{0};
};

// Bytes one request reserved from a MemoryBudget, given back when it goes
// out of scope unless handed over (Take) to the store that keeps them: a
// request that fails half-way holds nothing. Without a budget (null) it
// counts nothing. Used by one thread.
class BudgetReservation {
 public:
  explicit BudgetReservation(MemoryBudget* budget) : budget_(budget) {}
  ~BudgetReservation() {
    if (budget_ != nullptr && bytes_ > 0) budget_->Release(bytes_);
  }
  BudgetReservation(const BudgetReservation&) = delete;
  BudgetReservation& operator=(const BudgetReservation&) = delete;

  // Reserves `bytes` more (MemoryBudget::Reserve); OK without a budget.
  absl::Status Reserve(int64_t bytes, absl::string_view what, int64_t credit = 0) {
    if (budget_ == nullptr) return absl::OkStatus();
    absl::Status s = budget_->Reserve(bytes, what, credit);
    if (s.ok()) bytes_ += bytes;
    return s;
  }
  // Hands `bytes` to their keeper: no longer given back here. REQUIRES:
  // bytes <= this->bytes().
  void Take(int64_t bytes) { bytes_ -= bytes; }
  // Takes over bytes reserved before (e.g. the state a restore replaces):
  // given back here.
  void Adopt(int64_t bytes) { bytes_ += bytes; }
  int64_t bytes() const { return bytes_; }
  bool counted() const { return budget_ != nullptr; }

 private:
  MemoryBudget* const budget_;
  int64_t bytes_ = 0;
};

}  // namespace pscluster

#endif  // PSCLUSTER_PS_CORE_MEMORY_BUDGET_H_
