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
