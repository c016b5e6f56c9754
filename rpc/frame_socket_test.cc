#include "rpc/frame_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace pscluster {
namespace {

// A connected pair of TCP sockets on 127.0.0.1.
struct Pair {
  UniqueFd client;
  UniqueFd server;
};

Pair Connect() {
  int port = 0;
  absl::StatusOr<UniqueFd> listener = ListenTcp("127.0.0.1", 0, &port);
  EXPECT_TRUE(listener.ok()) << listener.status();
  absl::StatusOr<UniqueFd> client = DialTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
  EXPECT_TRUE(client.ok()) << client.status();
  Pair p;
  p.client = std::move(*client);
  p.server = UniqueFd(accept(listener->get(), nullptr, nullptr));
  EXPECT_TRUE(p.server.valid());
  return p;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(5); }

TEST(SplitHostPortTest, HostsAndPorts) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(SplitHostPort("127.0.0.1:2222", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 2222);
  ASSERT_TRUE(SplitHostPort("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(SplitHostPort("ps-0.ps.default.svc:2222", &host, &port).ok());
  EXPECT_EQ(host, "ps-0.ps.default.svc");
  EXPECT_FALSE(SplitHostPort("dns:///ps:2222", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("unix:/tmp/ps.sock", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("ps", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("ps:99999", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("::1:80", &host, &port).ok());
}

TEST(FrameSocketTest, FrameRoundTripsMetaAndPayloads) {
  Pair p = Connect();
  const std::string big(3 << 20, 'x');
  const std::vector<absl::string_view> payloads = {"abc", "", big};
  // Written on another thread: 3 MiB need not fit in the socket's buffers.
  absl::Status written;
  std::thread writer(
      [&] { written = WriteFrame(p.client.get(), 7, 5, "meta!", payloads, Soon()); });
  FrameHead head;
  bool closed = true;
  ASSERT_TRUE(
      ReadFrameHead(p.server.get(), 64 << 20, Soon(), absl::Seconds(5), &head, &closed).ok());
  EXPECT_FALSE(closed);
  EXPECT_EQ(head.kind, 7);
  EXPECT_EQ(head.code, 5);
  EXPECT_EQ(head.meta, "meta!");
  ASSERT_EQ(head.payload_sizes.size(), 3u);
  EXPECT_EQ(head.payload_sizes[0], 3u);
  EXPECT_EQ(head.payload_sizes[1], 0u);
  EXPECT_EQ(head.payload_sizes[2], big.size());
  EXPECT_EQ(head.payload_bytes, 3 + big.size());
  std::string a(3, '\0'), c(big.size(), '\0');
  ASSERT_TRUE(ReadFull(p.server.get(), a.data(), a.size(), head.deadline).ok());
  ASSERT_TRUE(ReadFull(p.server.get(), c.data(), c.size(), head.deadline).ok());
  writer.join();
  EXPECT_TRUE(written.ok()) << written;
  EXPECT_EQ(a, "abc");
  EXPECT_EQ(c, big);
}

TEST(FrameSocketTest, OversizedFrameIsRefusedBeforeItsPayload) {
  Pair p = Connect();
  const std::string payload(2048, 'y');
  ASSERT_TRUE(WriteFrame(p.client.get(), 1, 0, "m", {payload}, Soon()).ok());
  FrameHead head;
  bool closed = false;
  const absl::Status s =
      ReadFrameHead(p.server.get(), 1024, Soon(), absl::Seconds(5), &head, &closed);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("larger than the limit of 1024"), absl::string_view::npos) << s;
}

TEST(FrameSocketTest, GarbageIsNotAFrame) {
  Pair p = Connect();
  const std::string garbage = "GET / HTTP/1.1\r\nHost: ps\r\n\r\n-----";
  ASSERT_EQ(send(p.client.get(), garbage.data(), garbage.size(), 0),
            static_cast<ssize_t>(garbage.size()));
  FrameHead head;
  bool closed = false;
  const absl::Status s =
      ReadFrameHead(p.server.get(), 1 << 20, Soon(), absl::Seconds(5), &head, &closed);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("bad magic"), absl::string_view::npos) << s;
}

TEST(FrameSocketTest, SizesThatDoNotAddUpAreRefused) {
  Pair p = Connect();
  // A well-formed header whose total disagrees with its sizes.
  const std::string frame = EncodeFrameHead(1, 0, 0, {8, 8}, 10);
  ASSERT_EQ(send(p.client.get(), frame.data(), frame.size(), 0),
            static_cast<ssize_t>(frame.size()));
  FrameHead head;
  bool closed = false;
  const absl::Status s =
      ReadFrameHead(p.server.get(), 1 << 20, Soon(), absl::Seconds(5), &head, &closed);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

TEST(FrameSocketTest, ClosedPeerAndTimeouts) {
  Pair p = Connect();
  FrameHead head;
  bool closed = false;
  // Nothing sent: the wait for the first byte ends at its deadline.
  absl::Status s = ReadFrameHead(p.server.get(), 1 << 20, absl::Now() + absl::Milliseconds(50),
                                 absl::Seconds(5), &head, &closed);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  // A frame cut short: the rest is waited for only until the frame's deadline.
  ASSERT_EQ(send(p.client.get(), "PS", 2, 0), 2);
  s = ReadFrameHead(p.server.get(), 1 << 20, Soon(), absl::Milliseconds(50), &head, &closed);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  p.client.Reset();
  Pair q = Connect();
  q.client.Reset();
  s = ReadFrameHead(q.server.get(), 1 << 20, Soon(), absl::Seconds(5), &head, &closed);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
}

// Sends `bytes` from another thread (they need not fit in the socket's
// buffers), then ends the stream if `then_end`; joined when destroyed.
class Sender {
 public:
  Sender(int fd, std::string bytes, bool then_end = false)
      : bytes_(std::move(bytes)), thread_([this, fd, then_end] {
          size_t done = 0;
          while (done < bytes_.size()) {
            const ssize_t n = send(fd, bytes_.data() + done, bytes_.size() - done, MSG_NOSIGNAL);
            if (n <= 0) return;
            done += static_cast<size_t>(n);
          }
          if (then_end) shutdown(fd, SHUT_WR);
        }) {}
  ~Sender() { thread_.join(); }

 private:
  const std::string bytes_;
  std::thread thread_;
};

TEST(FrameSocketTest, ReadGrowingGrowsOnlyAsBytesArrive) {
  Pair p = Connect();
  std::string sent(1 << 20, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7);
  // 1 MiB, then the end: far short of the 100 MiB announced.
  Sender sender(p.client.get(), sent, /*then_end=*/true);
  uint64_t granted = 0;
  std::string buffer;
  const absl::Status s =
      ReadGrowing(p.server.get(), size_t{100} << 20, &buffer, Soon(), [&](uint64_t bytes) {
        granted += bytes;
        return absl::OkStatus();
      });
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_LE(granted, (2u << 20) + (64u << 10));
  EXPECT_LE(buffer.capacity(), (2u << 20) + (64u << 10));
  ASSERT_GE(buffer.size(), sent.size());
  EXPECT_EQ(buffer.substr(0, sent.size()), sent);
}

TEST(FrameSocketTest, ReadGrowingReadsWholeFramesExactly) {
  Pair p = Connect();
  std::string sent((3 << 20) + 17, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 13);
  Sender sender(p.client.get(), sent + sent.substr(0, 1000));
  // Grown from nothing: ends exactly at the size, every byte in place.
  uint64_t granted = 0;
  std::string buffer;
  ASSERT_TRUE(ReadGrowing(p.server.get(), sent.size(), &buffer, Soon(), [&](uint64_t bytes) {
                granted += bytes;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(buffer, sent);
  EXPECT_EQ(buffer.capacity(), sent.size());
  EXPECT_GE(granted + 15, sent.size());
  // A buffer that already holds the size is read into as it is.
  const char* kept = buffer.data();
  granted = 0;
  ASSERT_TRUE(ReadGrowing(p.server.get(), 1000, &buffer, Soon(), [&](uint64_t bytes) {
                granted += bytes;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(granted, 0u);
  EXPECT_EQ(buffer.data(), kept);
  EXPECT_EQ(buffer, sent.substr(0, 1000));
}

TEST(FrameSocketTest, ARefusedGrowthStopsTheRead) {
  Pair p = Connect();
  Sender sender(p.client.get(), std::string(1 << 20, 'z'));
  int asked = 0;
  std::string buffer;
  const absl::Status s =
      ReadGrowing(p.server.get(), 1 << 20, &buffer, Soon(), [&](uint64_t) {
        return ++asked == 1 ? absl::OkStatus() : absl::ResourceExhaustedError("no more");
      });
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(asked, 2);
  EXPECT_LE(buffer.capacity(), 64u << 10);
  p.server.Reset();
}

TEST(FrameSocketTest, AMetaPastItsLimitIsRefusedBeforeItIsRead) {
  Pair p = Connect();
  ASSERT_TRUE(WriteFrame(p.client.get(), 1, 0, std::string(100, 'm'), {}, Soon()).ok());
  FrameLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_meta_bytes = 16;
  limits.grow = [](uint64_t) { return absl::InternalError("nothing may be allocated"); };
  FrameHead head;
  bool closed = false;
  const absl::Status s =
      ReadFrameHead(p.server.get(), limits, Soon(), absl::Seconds(5), &head, &closed);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("100 bytes of meta"), absl::string_view::npos) << s;
}

TEST(FrameSocketTest, DiscardDropsBytesAndKeepsTheStreamInStep) {
  Pair p = Connect();
  Sender sender(p.client.get(), std::string(100 << 10, 'd') + "xyz");
  ASSERT_TRUE(Discard(p.server.get(), 100 << 10, Soon()).ok());
  std::string rest(3, '\0');
  ASSERT_TRUE(ReadFull(p.server.get(), rest.data(), rest.size(), Soon()).ok());
  EXPECT_EQ(rest, "xyz");
}

TEST(FrameSocketTest, DialingAClosedPortIsUnavailable) {
  int port = 0;
  {
    absl::StatusOr<UniqueFd> listener = ListenTcp("127.0.0.1", 0, &port);
    ASSERT_TRUE(listener.ok());
  }
  absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", port, Soon());
  EXPECT_TRUE(absl::IsUnavailable(fd.status())) << fd.status();
  EXPECT_NE(fd.status().message().find(absl::StrCat("127.0.0.1:", port)), absl::string_view::npos);
}

}  // namespace
}  // namespace pscluster
