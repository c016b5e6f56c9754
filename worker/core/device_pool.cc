#include "worker/core/device_pool.h"

#include "common/status_macros.h"

namespace pscluster {

DeviceThreads::DeviceThreads(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Loop(i + 1); });
}

DeviceThreads::~DeviceThreads() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void DeviceThreads::Loop(int index) {
  int64_t seen = 0;
  while (true) {
    const std::function<void(int)>* fn;
    {
      absl::MutexLock lock(&mu_);
      auto woken = [&]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || generation_ != seen; };
      mu_.Await(absl::Condition(&woken));
      if (stop_) return;
      seen = generation_;
      if (index >= n_) continue;  // not needed for this step
      fn = fn_;
    }
    (*fn)(index);
    absl::MutexLock lock(&mu_);
    --pending_;
  }
}

void DeviceThreads::Run(int n, const std::function<void(int)>& fn) {
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    pending_ = n - 1;
    ++generation_;
  }
  fn(0);
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  mu_.Await(absl::Condition(&done));
}

absl::StatusOr<std::unique_ptr<Devices>> Devices::Create(int64_t devices,
                                                         const BackendFactory& make_backend) {
  auto d = std::make_unique<Devices>();
  ASSIGN_OR_RETURN(d->backend, make_backend(BackendOptions()));
  if (devices > 1) {
    for (int64_t i = 0; i < devices; ++i) {
      auto slot = std::make_unique<DeviceSlot>();
      // Replica i on GPU i (mod the GPUs there are), or on the CPU.
      BackendOptions options;
      options.cuda_device = static_cast<int>(i);
      ASSIGN_OR_RETURN(slot->backend, make_backend(options));
      d->slots.push_back(std::move(slot));
    }
    d->threads = std::make_unique<DeviceThreads>(static_cast<int>(devices) - 1);
  }
  return d;
}

}  // namespace pscluster
