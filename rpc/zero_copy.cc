#include "rpc/zero_copy.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// First and largest block for the copied (small) parts of a message.
constexpr int kFirstBlockBytes = 4 << 10;
constexpr int kMaxBlockBytes = 1 << 20;

void DeleteKeepalive(void* user_data) { delete static_cast<std::shared_ptr<const void>*>(user_data); }

void KeepNothing(void*) {}

// A ZeroCopyOutputStream of gRPC slices: small writes go into blocks it
// allocates, aliased writes become slices that point at the caller's bytes.
class SliceOutputStream final : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  explicit SliceOutputStream(std::shared_ptr<const void> keepalive)
      : keepalive_(std::move(keepalive)) {}

  bool Next(void** data, int* size) override {
    CloseBlock();
    block_size_ = block_size_ == 0 ? kFirstBlockBytes : std::min(2 * block_size_, kMaxBlockBytes);
    block_ = grpc::Slice(static_cast<size_t>(block_size_));
    block_used_ = block_size_;
    *data = const_cast<uint8_t*>(block_.begin());
    *size = block_size_;
    bytes_ += block_size_;
    return true;
  }

  void BackUp(int count) override {
    block_used_ -= count;
    bytes_ -= count;
  }

  int64_t ByteCount() const override { return bytes_; }

  bool AllowsAliasing() const override { return true; }

  bool WriteAliasedRaw(const void* data, int size) override {
    CloseBlock();
    if (size <= 0) return true;
    void* user_data = keepalive_ ? new std::shared_ptr<const void>(keepalive_) : nullptr;
    slices_.emplace_back(const_cast<void*>(data), static_cast<size_t>(size),
                         keepalive_ ? &DeleteKeepalive : &KeepNothing, user_data);
    bytes_ += size;
    return true;
  }

  void Finish(grpc::ByteBuffer* out) {
    CloseBlock();
    grpc::ByteBuffer buffer(slices_.data(), slices_.size());
    out->Swap(&buffer);
  }

 private:
  // Keeps the used part of the current block.
  void CloseBlock() {
    if (block_used_ > 0) slices_.push_back(block_.sub(0, static_cast<size_t>(block_used_)));
    block_ = grpc::Slice();
    block_used_ = 0;
  }

  std::shared_ptr<const void> keepalive_;
  std::vector<grpc::Slice> slices_;
  grpc::Slice block_;
  int block_size_ = 0;
  int block_used_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace

void SerializeToByteBuffer(const google::protobuf::MessageLite& message,
                           std::shared_ptr<const void> keepalive, grpc::ByteBuffer* out) {
  SliceOutputStream stream(std::move(keepalive));
  {
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.EnableAliasing(true);
    message.SerializeToCodedStream(&coded);
  }
  stream.Finish(out);
}

absl::Status ParseFromByteBuffer(const grpc::ByteBuffer& buffer,
                                 google::protobuf::MessageLite* message, const char* what) {
  grpc::ByteBuffer copy(buffer);  // shares the slices, copies nothing
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", what, " (", buffer.Length(), " bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace pscluster
