// DevicePool: the compute a worker's running closures borrow. Each running
// closure gets a Workspace of its own: a backend with its scratch buffers
// (and, for a worker with several devices, JobSpec::devices, one backend per
// device plus the threads that run devices 1..n-1 of a step), and the
// caller's per-closure buffers. A returned Workspace is lent again to a
// later closure instead of being rebuilt: a CUDA backend and a thread are
// costly to start, and the buffers keep their allocations (the step buffers
// of param_router.h swap bytes with the answers they reuse). The pool holds
// as many Workspaces as closures ever ran at once.
//
// DeviceThreads, the threads of one Workspace, is usable on its own.
#ifndef PSCLUSTER_WORKER_CORE_DEVICE_POOL_H_
#define PSCLUSTER_WORKER_CORE_DEVICE_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "worker/core/backend.h"
#include "worker/core/backend_factory.h"
#include "worker/core/model.h"

namespace pscluster {

// Threads that run devices 1..n-1 of a step (device 0 runs on the caller's
// own thread), started once, not per step.
//
// Run is called by one thread at a time (the closure that holds them);
// the destructor stops and joins the threads.
class DeviceThreads {
 public:
  explicit DeviceThreads(int threads);
  ~DeviceThreads();
  DeviceThreads(const DeviceThreads&) = delete;
  DeviceThreads& operator=(const DeviceThreads&) = delete;

  // Runs fn(0) here and fn(1) .. fn(n - 1) on the threads, at the same time;
  // returns when all are done. REQUIRES: 1 <= n <= threads + 1.
  void Run(int n, const std::function<void(int)>& fn) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop(int index) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  const std::function<void(int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// One replica of a worker with several devices: its backend, scratch, slice
// of the step's batch, gradients and result.
struct DeviceSlot {
  std::unique_ptr<Backend> backend;
  ModelScratch scratch;
  ModelBatch batch;
  std::vector<Tensor> grads;
  std::vector<Tensor> row_grads;
  StepResult result;
};

// Builds a backend; the options say which GPU (BackendOptions::cuda_device).
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Backend>>(const BackendOptions&)>;

// The devices of one Workspace. Used by one thread at a time.
struct Devices {
  // Builds `devices` replicas' worth: `backend` from make_backend({}); with
  // devices > 1 also one slot per device d, its backend from make_backend
  // with cuda_device = d, and devices - 1 threads. Returns make_backend's
  // first error. REQUIRES: devices >= 1.
  static absl::StatusOr<std::unique_ptr<Devices>> Create(int64_t devices,
                                                         const BackendFactory& make_backend);

  // The backend of a step run whole on one device, and its scratch.
  std::unique_ptr<Backend> backend;
  ModelScratch scratch;
  // devices > 1: one slot per device, and the threads of devices 1.. (empty
  // and null for one device).
  std::vector<std::unique_ptr<DeviceSlot>> slots;
  std::unique_ptr<DeviceThreads> threads;
};

// Lends Workspaces (Devices plus the caller's `Buffers`, default
// constructible) to running closures. Thread-safe. REQUIRES: every lent
// Workspace is returned (dropped) before the pool is destroyed.
template <typename Buffers>
class DevicePool {
 public:
  struct Workspace {
    std::unique_ptr<Devices> devices;
    Buffers buffers;
  };

  // Returns a lent Workspace to its pool when its Lent is dropped.
  class Return {
   public:
    explicit Return(DevicePool* pool = nullptr) : pool_(pool) {}
    void operator()(Workspace* workspace) const {
      pool_->Put(std::unique_ptr<Workspace>(workspace));
    }

   private:
    DevicePool* pool_;
  };
  using Lent = std::unique_ptr<Workspace, Return>;

  struct Options {
    // Devices per Workspace (JobSpec::devices), >= 1.
    int64_t devices = 1;
    // Builds each backend (required).
    BackendFactory make_backend;
    // Called once on each new Workspace's buffers; null: they stay as
    // default constructed.
    std::function<void(Buffers*)> init_buffers;
  };

  explicit DevicePool(Options options) : options_(std::move(options)) {}
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // A free Workspace, as the last closure to use it left it, or a new one
  // (then errors as Devices::Create, and nothing is added to the pool).
  absl::StatusOr<Lent> Acquire() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        std::unique_ptr<Workspace> workspace = std::move(free_.back());
        free_.pop_back();
        return Lent(workspace.release(), Return(this));
      }
    }
    auto workspace = std::make_unique<Workspace>();
    absl::StatusOr<std::unique_ptr<Devices>> devices =
        Devices::Create(options_.devices, options_.make_backend);
    if (!devices.ok()) return devices.status();
    workspace->devices = *std::move(devices);
    if (options_.init_buffers) options_.init_buffers(&workspace->buffers);
    return Lent(workspace.release(), Return(this));
  }

 private:
  void Put(std::unique_ptr<Workspace> workspace) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    free_.push_back(std::move(workspace));
  }

  const Options options_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Workspace>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pscluster

#endif  // PSCLUSTER_WORKER_CORE_DEVICE_POOL_H_
