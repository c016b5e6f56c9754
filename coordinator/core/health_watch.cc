#include "coordinator/core/health_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pscluster {

HealthWatch::HealthWatch(Options options)
    : options_(std::move(options)),
      worker_down_(new std::atomic<bool>[options_.workers.size()]),
      worker_losses_(new std::atomic<int64_t>[options_.workers.size()]),
      down_since_(options_.workers.size(), absl::InfiniteFuture()),
      lost_(options_.workers.size(), false) {
  for (size_t w = 0; w < options_.workers.size(); ++w) {
    worker_down_[w] = false;
    worker_losses_[w] = 0;
  }
}

HealthWatch::~HealthWatch() { Join(); }

void HealthWatch::Start() {
  if (options_.health == nullptr) return;
  thread_ = std::thread([this] {
    while (!stop_) {
      CheckOnce();
      absl::SleepFor(options_.interval);
    }
  });
}

void HealthWatch::Stop() { stop_ = true; }

void HealthWatch::Join() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void HealthWatch::CheckOnce() {
  if (options_.check_ps) options_.check_ps();
  const std::vector<WorkerClient*>& workers = options_.workers;
  for (size_t w = 0; w < workers.size(); ++w) {
    const absl::Time checked = options_.now();
    const bool down = !options_.health->CheckWorker(static_cast<int>(w)).ok();
    if (down != worker_down_[w]) {
      options_.event(down ? "worker_down" : "worker_up",
                     absl::StrCat("worker ", w, " (", workers[w]->address(), ") is ",
                                  down ? "not answering" : "back"));
    }
    worker_down_[w] = down;
    if (!down) {
      down_since_[w] = absl::InfiniteFuture();
      lost_[w] = false;
      continue;
    }
    down_since_[w] = std::min(down_since_[w], checked);
    const absl::Duration silent = options_.now() - down_since_[w];
    if (silent < options_.worker_timeout) continue;
    // Hung or gone for worker_timeout_s: what it runs is given up on (and
    // re-dispatched by the dispatch loop). Cancelled on every pass while it
    // is lost, so that no call that slipped in waits for its deadline.
    if (!lost_[w]) {
      lost_[w] = true;
      ++worker_losses_[w];  // before the cancel: dispatch does not count the attempt
      if (options_.on_worker_lost) options_.on_worker_lost();
      options_.event("worker_lost",
                     absl::StrFormat("worker %d (%s) has failed every health check for %.1f s "
                                     "(worker_timeout_s %g): declared lost; its closures in "
                                     "flight are cancelled and re-dispatched",
                                     w, workers[w]->address(), absl::ToDoubleSeconds(silent),
                                     absl::ToDoubleSeconds(options_.worker_timeout)));
    }
    workers[w]->CancelCalls();
  }
}

}  // namespace pscluster
