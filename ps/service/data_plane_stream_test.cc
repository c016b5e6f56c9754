#include "ps/service/data_plane_stream.h"

#include <sys/socket.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rpc/frame_socket.h"

namespace pscluster {
namespace {

// A deadline 10 s from now: every wait here is bounded.
absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// A connected pair of TCP sockets on 127.0.0.1: the server's end (read
// through a DataPlaneSocketStream) and the client's.
struct Pair {
  UniqueFd server;
  UniqueFd client;
};

Pair Connect() {
  int port = 0;
  absl::StatusOr<UniqueFd> listener = ListenTcp("127.0.0.1", 0, &port);
  EXPECT_TRUE(listener.ok()) << listener.status();
  Pair p;
  absl::StatusOr<UniqueFd> client = DialTcp("127.0.0.1", port, Soon());
  EXPECT_TRUE(client.ok()) << client.status();
  p.client = std::move(*client);
  p.server = UniqueFd(accept(listener->get(), nullptr, nullptr));
  EXPECT_TRUE(p.server.valid());
  return p;
}

std::string Bytes(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + i * 7);
  return s;
}

// Sends one frame with one payload from the client's end.
void Send(int fd, absl::string_view meta, const std::string& payload) {
  ASSERT_TRUE(WriteFrame(fd, 1, 0, meta, {payload}, Soon()).ok());
}

// Reads one frame of one payload through `stream`.
absl::Status Receive(FrameStream& stream, std::string* meta, std::string* payload) {
  FrameHead head;
  bool closed = false;
  absl::Status s =
      ReadFrameHead(stream, int64_t{64} << 20, Soon(), absl::Seconds(10), &head, &closed);
  if (!s.ok()) return s;
  if (head.payload_sizes.size() != 1) return absl::InternalError("not one payload");
  *meta = head.meta;
  payload->resize(head.payload_sizes[0]);
  return stream.ReadFull(payload->data(), payload->size(), head.deadline);
}

TEST(DataPlaneSocketStreamTest, SmallFrameThroughTheLentBuffer) {
  Pair p = Connect();
  DataPlaneSocketStream stream(p.server.get());
  std::vector<char> buffer(16 << 10);
  stream.Lend(absl::MakeSpan(buffer));
  const std::string sent = Bytes(4096, 3);
  Send(p.client.get(), "meta", sent);
  std::string meta, payload;
  ASSERT_TRUE(Receive(stream, &meta, &payload).ok());
  EXPECT_EQ(meta, "meta");
  EXPECT_EQ(payload, sent);
  EXPECT_FALSE(stream.HasBufferedBytes());
  EXPECT_FALSE(stream.TryReadAhead());  // nothing more sent
  stream.Return();
}

TEST(DataPlaneSocketStreamTest, LargePayloadAndNoBuffer) {
  Pair p = Connect();
  DataPlaneSocketStream stream(p.server.get());
  std::vector<char> buffer(16 << 10);
  const std::string large = Bytes(3 << 20, 5);  // more than the socket buffers hold
  std::thread sender([&] { Send(p.client.get(), "big", large); });
  stream.Lend(absl::MakeSpan(buffer));
  std::string meta, payload;
  ASSERT_TRUE(Receive(stream, &meta, &payload).ok());
  stream.Return();
  sender.join();
  EXPECT_EQ(meta, "big");
  EXPECT_EQ(payload, large);

  // Without a buffer lent (an empty one), every piece is read as asked.
  const std::string small = Bytes(100, 9);
  Send(p.client.get(), "small", small);
  stream.Lend({});
  EXPECT_FALSE(stream.TryReadAhead());
  ASSERT_TRUE(Receive(stream, &meta, &payload).ok());
  EXPECT_EQ(payload, small);
}

TEST(DataPlaneSocketStreamTest, BytesReadAheadSurviveTheReturn) {
  Pair p = Connect();
  DataPlaneSocketStream stream(p.server.get());
  std::vector<char> first(16 << 10), second(16 << 10);
  const std::string a = Bytes(1000, 1), b = Bytes(2000, 2), c = Bytes(3000, 3);
  // Three frames sent at once: the first recv takes them all.
  std::string frames;
  for (const auto& [meta, payload] : {std::pair("a", &a), std::pair("b", &b), std::pair("c", &c)}) {
    frames += EncodeFrameHead(1, 0, 1, {payload->size()}, payload->size());
    frames += meta;
    frames += *payload;
  }
  // One send: on loopback the bytes are all there when it returns.
  ASSERT_EQ(send(p.client.get(), frames.data(), frames.size(), 0),
            static_cast<ssize_t>(frames.size()));
  std::string meta, payload;
  stream.Lend(absl::MakeSpan(first));
  ASSERT_TRUE(Receive(stream, &meta, &payload).ok());
  EXPECT_EQ(payload, a);
  EXPECT_TRUE(stream.HasBufferedBytes());
  // Taken back with two frames unread: they stay with the stream, and are
  // read without a buffer, and then through another.
  stream.Return();
  first.assign(first.size(), '\0');
  EXPECT_TRUE(stream.HasBufferedBytes());
  ASSERT_TRUE(Receive(stream, &meta, &payload).ok());
  EXPECT_EQ(meta, "b");
  EXPECT_EQ(payload, b);
  stream.Lend(absl::MakeSpan(second));
  ASSERT_TRUE(Receive(stream, &meta, &payload).ok());
  EXPECT_EQ(meta, "c");
  EXPECT_EQ(payload, c);
  EXPECT_FALSE(stream.HasBufferedBytes());
  stream.Return();
}

TEST(DataPlaneSocketStreamTest, DeadlineAndEnd) {
  Pair p = Connect();
  DataPlaneSocketStream stream(p.server.get());
  std::vector<char> buffer(16 << 10);
  stream.Lend(absl::MakeSpan(buffer));
  char byte = 0;
  bool closed = false;
  absl::Status s = stream.ReadFirstByte(&byte, absl::Now() + absl::Milliseconds(20), &closed);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_FALSE(closed);

  // Half a frame, then the end: the read fails, naming it.
  const std::string head = EncodeFrameHead(1, 0, 0, {100}, 100);
  ASSERT_EQ(send(p.client.get(), head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  ASSERT_EQ(send(p.client.get(), "xyz", 3, 0), 3);
  shutdown(p.client.get(), SHUT_WR);
  std::string meta, payload;
  s = Receive(stream, &meta, &payload);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;

  // A clean end before a frame: `closed`.
  s = stream.ReadFirstByte(&byte, Soon(), &closed);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(closed);
  stream.Return();
}

TEST(DataPlaneSocketStreamTest, WritesWholeFramesAndLargeOnes) {
  Pair p = Connect();
  DataPlaneSocketStream stream(p.server.get());
  const std::string small = Bytes(4096, 4);
  ASSERT_TRUE(WriteFrame(stream, 2, 0, "m", {small}, Soon()).ok());
  FrameHead head;
  bool closed = false;
  ASSERT_TRUE(
      ReadFrameHead(p.client.get(), 1 << 20, Soon(), absl::Seconds(10), &head, &closed).ok());
  std::string got(head.payload_bytes, '\0');
  ASSERT_TRUE(ReadFull(p.client.get(), got.data(), got.size(), Soon()).ok());
  EXPECT_EQ(got, small);

  // More than the socket takes at once: the rest is written blocking.
  const std::string large = Bytes(8 << 20, 6);
  std::string received;
  std::thread reader([&] {
    FrameHead h;
    bool c = false;
    if (!ReadFrameHead(p.client.get(), 64 << 20, Soon(), absl::Seconds(10), &h, &c).ok()) return;
    received.resize(h.payload_bytes);
    if (!ReadFull(p.client.get(), received.data(), received.size(), Soon()).ok()) received.clear();
  });
  absl::Status s = WriteFrame(stream, 2, 0, "big", {large}, Soon());
  reader.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(received, large);

  // The peer gone: UNAVAILABLE, no signal.
  p.client.Reset();
  for (int i = 0; i < 100 && s.ok(); ++i) s = WriteFrame(stream, 2, 0, "m", {large}, Soon());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

}  // namespace
}  // namespace pscluster
