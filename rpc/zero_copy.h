// Zero-copy protobuf <-> grpc::ByteBuffer for the data plane.
//
// gRPC's default protobuf serializer copies every `bytes` field into fresh
// slices, and the parser copies it out again into fresh strings: for a
// 16 MiB tensor that is two extra copies per hop, into memory the kernel has
// to fault in each time. Here, large `bytes` fields are sent as slices that
// point into the message itself (protobuf's aliasing output), and messages
// are parsed into objects reused from a MessagePool, whose strings keep
// their capacity. The bytes on the wire are the ordinary protobuf encoding:
// a client or server on either side may use the generated code instead.
#ifndef PSCLUSTER_RPC_ZERO_COPY_H_
#define PSCLUSTER_RPC_ZERO_COPY_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace pscluster {

// Serializes `message` into `out`. `bytes`/`string` fields too large to be
// worth copying are not copied: their slices point into `message`, so
// `message` must stay unchanged and alive until gRPC has released `out`'s
// slices. `keepalive` (may be null) is held until the last such slice is
// released: give it ownership of `message` when gRPC sends `out` after the
// caller returns (a server's response); a caller that waits for the call to
// finish may pass null.
void SerializeToByteBuffer(const google::protobuf::MessageLite& message,
                           std::shared_ptr<const void> keepalive, grpc::ByteBuffer* out);

// Parses `buffer` into `message` (cleared first; its strings and repeated
// fields keep their capacity). INVALID_ARGUMENT naming `what` if the bytes
// are not a valid encoding.
absl::Status ParseFromByteBuffer(const grpc::ByteBuffer& buffer,
                                 google::protobuf::MessageLite* message, const char* what);

// A free list of messages of type T (a protobuf message) so that each call
// parses or builds into memory that is already allocated and faulted in.
// Keeps free messages of at most `max_free_bytes` in all (SpaceUsedLong);
// others are freed on release, so a PS holding large variables does not also
// keep copies of its largest messages.
// Thread-safe.
template <typename T>
class MessagePool {
 public:
  explicit MessagePool(size_t max_free_bytes) : max_free_bytes_(max_free_bytes) {}

  // A message from the free list (cleared), or a new one. Returning it to
  // the pool happens when the last copy of the shared_ptr goes away.
  std::shared_ptr<T> Get() {
    std::unique_ptr<T> message;
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        message = std::move(free_.back().first);
        free_bytes_ -= free_.back().second;
        free_.pop_back();
      }
    }
    if (message == nullptr) message = std::make_unique<T>();
    uint64_t generation;
    {
      absl::MutexLock lock(&mu_);
      generation = generation_;
    }
    return std::shared_ptr<T>(message.release(),
                              [this, generation](T* m) { Release(m, generation); });
  }

  // Frees every message on the free list, and those in use (e.g. still held
  // by gRPC until it has sent them) when they are released; e.g. when the
  // job whose tensors they were sized for has ended.
  void Clear() {
    std::vector<std::pair<std::unique_ptr<T>, size_t>> free;
    {
      absl::MutexLock lock(&mu_);
      free.swap(free_);
      free_bytes_ = 0;
      ++generation_;
    }
  }

  // Messages freed on release because they were too large, so far.
  size_t dropped() const {
    absl::MutexLock lock(&mu_);
    return dropped_;
  }

 private:
  void Release(T* m, uint64_t generation) {
    std::unique_ptr<T> message(m);
    const size_t bytes = message->SpaceUsedLong();
    absl::MutexLock lock(&mu_);
    if (generation != generation_) return;  // handed out before a Clear()
    if (free_bytes_ + bytes > max_free_bytes_) {
      ++dropped_;
      return;  // `message` is freed after `lock` is released (declared before it)
    }
    message->Clear();
    free_bytes_ += bytes;
    free_.emplace_back(std::move(message), bytes);
  }

  const size_t max_free_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::pair<std::unique_ptr<T>, size_t>> free_ ABSL_GUARDED_BY(mu_);
  size_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Clear()
};

}  // namespace pscluster

#endif  // PSCLUSTER_RPC_ZERO_COPY_H_
