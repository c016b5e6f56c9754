#include "rpc/zero_copy.h"

#include <grpcpp/support/slice.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "protos/ps.pb.h"

namespace pscluster {
namespace {

PushRequest BigPush(size_t bytes) {
  PushRequest request;
  NamedTensor* grad = request.add_gradients();
  grad->set_name("w");
  grad->mutable_tensor()->set_dtype(DT_FLOAT32);
  grad->mutable_tensor()->add_shape(static_cast<int64_t>(bytes / 4));
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 7 + 3);
  grad->mutable_tensor()->set_data(data);
  request.mutable_update()->set_closure_id(5);
  request.mutable_update()->set_step(2);
  request.mutable_pull()->add_names("w");
  return request;
}

TEST(ZeroCopyTest, RoundTripsSmallAndLargeMessagesAsProtobufEncoding) {
  for (size_t bytes : {size_t{0}, size_t{64}, size_t{5000}, size_t{1} << 20, size_t{9} << 20}) {
    const PushRequest request = BigPush(bytes);
    grpc::ByteBuffer buffer;
    SerializeToByteBuffer(request, nullptr, &buffer);
    ASSERT_EQ(buffer.Length(), request.ByteSizeLong()) << bytes;
    // The bytes are the standard encoding.
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    std::string wire;
    for (const grpc::Slice& s : slices) wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
    EXPECT_EQ(wire, request.SerializeAsString()) << bytes;
    PushRequest parsed;
    ASSERT_TRUE(ParseFromByteBuffer(buffer, &parsed, "PushRequest").ok());
    EXPECT_EQ(parsed.SerializeAsString(), request.SerializeAsString()) << bytes;
  }
}

TEST(ZeroCopyTest, LargeBytesFieldIsNotCopied) {
  const PushRequest request = BigPush(1 << 20);
  grpc::ByteBuffer buffer;
  SerializeToByteBuffer(request, nullptr, &buffer);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  const char* data = request.gradients(0).tensor().data().data();
  bool aliased = false;
  for (const grpc::Slice& s : slices) {
    aliased |= reinterpret_cast<const char*>(s.begin()) == data && s.size() == (1u << 20);
  }
  EXPECT_TRUE(aliased);
}

TEST(ZeroCopyTest, KeepaliveIsHeldUntilTheBufferIsReleased) {
  auto message = std::make_shared<PushRequest>(BigPush(1 << 20));
  std::weak_ptr<PushRequest> weak = message;
  auto buffer = std::make_unique<grpc::ByteBuffer>();
  SerializeToByteBuffer(*message, message, buffer.get());
  message.reset();
  EXPECT_FALSE(weak.expired());
  PushRequest parsed;
  ASSERT_TRUE(ParseFromByteBuffer(*buffer, &parsed, "PushRequest").ok());
  EXPECT_EQ(parsed.gradients(0).tensor().data().size(), 1u << 20);
  buffer.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(ZeroCopyTest, MalformedBytesAreInvalidArgumentNamingTheMessage) {
  const std::string junk = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";
  grpc::Slice slice(junk);
  grpc::ByteBuffer buffer(&slice, 1);
  PushRequest parsed;
  absl::Status s = ParseFromByteBuffer(buffer, &parsed, "PushRequest");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("malformed PushRequest"), std::string::npos) << s;
}

TEST(ZeroCopyTest, PoolReusesMessagesAndDropsOversizedOnes) {
  MessagePool<PushRequest> pool(/*max_free_bytes=*/1 << 20);
  const PushRequest* first;
  {
    std::shared_ptr<PushRequest> m = pool.Get();
    first = m.get();
    *m = BigPush(4096);
  }
  {
    std::shared_ptr<PushRequest> m = pool.Get();
    EXPECT_EQ(m.get(), first);
    EXPECT_EQ(m->gradients_size(), 0);  // cleared
    *m = BigPush(2 << 20);              // too big to keep
  }
  EXPECT_EQ(pool.dropped(), 1u);
}

TEST(ZeroCopyTest, ClearFreesTheFreeListAndMessagesStillInUse) {
  MessagePool<PushRequest> pool(/*max_free_bytes=*/1 << 20);
  const PushRequest* pooled;
  {
    std::shared_ptr<PushRequest> m = pool.Get();
    pooled = m.get();
    *m = BigPush(4096);
  }
  std::shared_ptr<PushRequest> in_use = pool.Get();  // the pooled one, reused
  EXPECT_EQ(in_use.get(), pooled);
  *in_use = BigPush(4096);
  pool.Clear();
  in_use.reset();  // handed out before the Clear: freed, not pooled again
  std::shared_ptr<PushRequest> fresh = pool.Get();
  EXPECT_EQ(fresh->gradients_size(), 0);
  const PushRequest* after = fresh.get();
  fresh.reset();  // handed out after the Clear: pooled as usual
  EXPECT_EQ(pool.Get().get(), after);
}

}  // namespace
}  // namespace pscluster
