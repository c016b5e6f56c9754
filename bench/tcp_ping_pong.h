// TcpPingPong: raw TCP ping-pong over 127.0.0.1, the ceiling the data-plane
// benchmark measures pscluster against (bench/data_plane_bench.cc).
#ifndef PSCLUSTER_BENCH_TCP_PING_PONG_H_
#define PSCLUSTER_BENCH_TCP_PING_PONG_H_

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pscluster {
namespace bench {

// One connection over 127.0.0.1 with its own server thread. Each round trip:
// the client sends an 8-byte length and N bytes; the server thread reads all
// N, then sends them back. The client's send and receive calls time out
// after `timeout`; `buffer_bytes` > 0 sets SO_SNDBUF/SO_RCVBUF before
// connecting (0: kernel autotuning). Not thread-safe: one caller at a time.
class TcpPingPong {
 public:
  static absl::StatusOr<std::unique_ptr<TcpPingPong>> Create(int buffer_bytes,
                                                             std::chrono::seconds timeout);
  // Stops and joins the server thread.
  ~TcpPingPong();

  // REQUIRES: data.size() > 0; `reply` is resized to data.size().
  absl::Status RoundTrip(const std::string &data, std::string *reply);

  // RoundTrip in two halves, so that one caller can have round trips on
  // several connections in flight at once (send on all, then receive on
  // all): the server thread reads all N bytes before it answers, so a
  // pending reply never blocks another connection's send.
  // REQUIRES: Receive follows each Send, with a `reply` of the sent size.
  absl::Status Send(const std::string &data);
  absl::Status Receive(std::string *reply);

 private:
  TcpPingPong() = default;
  // Echoes until a zero length or an error.
  static void Serve(int fd);

  int client_fd_ = -1;
  int server_fd_ = -1;
  std::thread server_;
};

}  // namespace bench
}  // namespace pscluster

#endif  // PSCLUSTER_BENCH_TCP_PING_PONG_H_
