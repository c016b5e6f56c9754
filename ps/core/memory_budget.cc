#include "ps/core/memory_budget.h"

#include "absl/strings/str_cat.h"

namespace pscluster {

bool MemoryBudget::TryReserve(int64_t bytes, int64_t credit) {
  if (bytes <= 0) return true;
  int64_t held = held_.load(std::memory_order_relaxed);
  do {
    if (limit_ > 0 && held - credit + bytes > limit_) return false;
  } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  return true;
}

absl::Status MemoryBudget::Reserve(int64_t bytes, absl::string_view what, int64_t credit) {
  if (TryReserve(bytes, credit)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": ", bytes, " bytes requested, ", held() - credit,
      " held on this PS over all jobs, limit ", limit_, " bytes (ps_server --max_memory_bytes)"));
}

void MemoryBudget::Release(int64_t bytes) {
  if (bytes > 0) held_.fetch_sub(bytes, std::memory_order_relaxed);
}

}  // namespace pscluster
