#include "coordinator/core/health_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pscluster {

HealthWatch::HealthWatch(Options options)
    : options_(std::move(options)),
      down_since_(options_.workers.size(), absl::InfiniteFuture()),
      lost_(options_.workers.size(), false),
      answers_seen_(options_.workers.size(), 0) {
  absl::MutexLock lock(&flags_mu_);
  Grow(options_.workers.size());
}

void HealthWatch::Grow(size_t n) {
  while (worker_down_.size() < n) worker_down_.emplace_back(false);
  while (worker_losses_.size() < n) worker_losses_.emplace_back(0);
  while (worker_answers_.size() < n) worker_answers_.emplace_back(0);
}

std::atomic<bool>* HealthWatch::worker_down(int w) {
  absl::MutexLock lock(&flags_mu_);
  Grow(static_cast<size_t>(w) + 1);
  return &worker_down_[w];
}

std::atomic<int64_t>* HealthWatch::worker_losses(int w) {
  absl::MutexLock lock(&flags_mu_);
  Grow(static_cast<size_t>(w) + 1);
  return &worker_losses_[w];
}

std::atomic<int64_t>* HealthWatch::worker_answers(int w) {
  absl::MutexLock lock(&flags_mu_);
  Grow(static_cast<size_t>(w) + 1);
  return &worker_answers_[w];
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
  WorkerRoster* const roster = options_.roster;
  const size_t n = roster != nullptr ? static_cast<size_t>(roster->size()) : options_.workers.size();
  if (down_since_.size() < n) {
    down_since_.resize(n, absl::InfiniteFuture());
    lost_.resize(n, false);
    answers_seen_.resize(n, 0);
  }
  for (size_t w = 0; w < n; ++w) {
    // A worker that left (or is leaving) the cluster is no failure.
    if (roster != nullptr && !roster->active(static_cast<int>(w))) continue;
    WorkerClient* const client =
        roster != nullptr ? roster->client(static_cast<int>(w)) : options_.workers[w];
    std::atomic<bool>& worker_down = *this->worker_down(static_cast<int>(w));
    const absl::Time checked = options_.now();
    const int64_t answers = worker_answers(static_cast<int>(w))->load();
    const bool answered = answers != answers_seen_[w];
    answers_seen_[w] = answers;
    bool down;
    if (worker_down) {
      // Marked down (by a check, or by dispatch on an UNAVAILABLE): only the
      // worker itself says it is back.
      down = !options_.health->CheckWorker(static_cast<int>(w)).ok();
    } else if (answered) {
      down = false;  // it answered calls since the last pass: no check needed
      options_.health->WorkerAnswered(static_cast<int>(w));
    } else {
      down = !options_.health->CheckWorkerWithin(static_cast<int>(w), options_.interval).ok();
    }
    if (down != worker_down) {
      options_.event(down ? "worker_down" : "worker_up",
                     absl::StrCat("worker ", w, " (", client->address(), ") is ",
                                  down ? "not answering" : "back"));
    }
    worker_down = down;
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
      ++*worker_losses(static_cast<int>(w));  // before the cancel: dispatch does not count it
      if (options_.on_worker_lost) options_.on_worker_lost();
      options_.event("worker_lost",
                     absl::StrFormat("worker %d (%s) has failed every health check for %.1f s "
                                     "(worker_timeout_s %g): declared lost; its closures in "
                                     "flight are cancelled and re-dispatched",
                                     w, client->address(), absl::ToDoubleSeconds(silent),
                                     absl::ToDoubleSeconds(options_.worker_timeout)));
    }
    client->CancelCalls();
  }
}

}  // namespace pscluster
