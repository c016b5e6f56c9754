#include "coordinator/core/worker_roster.h"

#include "absl/strings/str_cat.h"
#include "common/cluster_config.h"

namespace pscluster {

WorkerRoster::WorkerRoster(std::vector<WorkerClient*> initial, Options options)
    : options_(std::move(options)) {
  for (WorkerClient* w : initial) {
    Entry e;
    e.client = w;
    e.address = w->address();
    entries_.push_back(std::move(e));
  }
}

int WorkerRoster::FindLocked(const std::string& address) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].address == address) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<int> WorkerRoster::Join(const std::string& address) {
  if (absl::Status s = CheckHostPort(address); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot register worker '", address, "': ", s.message()));
  }
  {
    absl::MutexLock lock(&mu_);
    const int i = FindLocked(address);
    if (i >= 0 && entries_[i].active) {
      return absl::AlreadyExistsError(
          absl::StrCat("worker ", address, " is already worker ", i, " of this cluster"));
    }
  }
  // Outside the lock: a probe may take its whole deadline.
  if (options_.probe) {
    if (absl::Status s = options_.probe(address); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("cannot register worker ", address,
                                                 ": it does not answer Ping: ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  int i = FindLocked(address);
  if (i >= 0) {
    if (entries_[i].active) {
      return absl::AlreadyExistsError(
          absl::StrCat("worker ", address, " is already worker ", i, " of this cluster"));
    }
    entries_[i].active = true;  // back at its old index, with its old client
  } else {
    if (!options_.connect) {
      return absl::FailedPreconditionError("this coordinator takes no registrations");
    }
    i = static_cast<int>(entries_.size());
    Entry e;
    e.owned = options_.connect(address, i);
    e.client = e.owned.get();
    e.address = address;
    entries_.push_back(std::move(e));
  }
  ++version_;
  return i;
}

absl::StatusOr<int> WorkerRoster::Leave(const std::string& address, absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  const int i = FindLocked(address);
  if (i < 0 || !entries_[i].active) {
    return absl::NotFoundError(
        absl::StrCat("worker ", address, " is not a member of this cluster"));
  }
  entries_[i].active = false;
  ++version_;
  // By index: entries_ may grow (and move) while the lock is released.
  auto drained = [this, i]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return entries_[i].in_flight == 0 && entries_[i].expected == 0;
  };
  mu_.AwaitWithTimeout(absl::Condition(&drained), wait);
  return entries_[i].in_flight + entries_[i].expected;
}

int WorkerRoster::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

WorkerClient* WorkerRoster::client(int i) const {
  absl::MutexLock lock(&mu_);
  return entries_[i].client;
}

bool WorkerRoster::active(int i) const {
  absl::MutexLock lock(&mu_);
  return i >= 0 && i < static_cast<int>(entries_.size()) && entries_[i].active;
}

std::vector<int> WorkerRoster::ActiveIndices() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].active) out.push_back(static_cast<int>(i));
  }
  return out;
}

int WorkerRoster::active_count() const { return static_cast<int>(ActiveIndices().size()); }

int64_t WorkerRoster::version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

bool WorkerRoster::BeginCall(int i) {
  absl::MutexLock lock(&mu_);
  Entry& e = entries_[i];
  if (!e.active && e.expected == 0) return false;
  if (e.expected > 0) --e.expected;
  ++e.in_flight;
  return true;
}

bool WorkerRoster::ExpectCalls(const std::vector<int>& workers) {
  absl::MutexLock lock(&mu_);
  for (int w : workers) {
    if (w < 0 || static_cast<size_t>(w) >= entries_.size() || !entries_[w].active) return false;
  }
  for (int w : workers) ++entries_[w].expected;
  return true;
}

void WorkerRoster::ClearExpected(const std::vector<int>& workers) {
  absl::MutexLock lock(&mu_);
  for (int w : workers) {
    if (w >= 0 && static_cast<size_t>(w) < entries_.size()) entries_[w].expected = 0;
  }
}

void WorkerRoster::EndCall(int i) {
  absl::MutexLock lock(&mu_);
  --entries_[i].in_flight;
}

}  // namespace pscluster
