// Helpers the data plane's tests share: a frame round trip on a plain socket
// (an int fd) or a TLS FrameStream, and the floats of a pull's answer.
#ifndef PSCLUSTER_PS_SERVICE_DATA_PLANE_TEST_UTIL_H_
#define PSCLUSTER_PS_SERVICE_DATA_PLANE_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "protos/ps.pb.h"
#include "ps/service/data_plane_wire.h"
#include "rpc/frame_socket.h"

namespace pscluster {
namespace data_plane_test {

// A deadline 10 s from now: every wait of a data plane test is bounded.
inline absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// Reads one answer from `conn` (an fd or a FrameStream&) into `response`;
// the answer's error when its code is not OK.
template <typename Conn, typename Response>
absl::Status ReadAnswer(Conn&& conn, Response* response) {
  FrameHead head;
  bool closed = false;
  absl::Status s =
      ReadFrameHead(conn, int64_t{64} << 20, Soon(), absl::Seconds(10), &head, &closed);
  if (!s.ok()) return s;
  if (head.code != 0) return absl::Status(static_cast<absl::StatusCode>(head.code), head.meta);
  return ReceiveMessage(conn, head, response, head.deadline);
}

// Sends `request` as one frame of `kind` and reads its answer.
template <typename Conn, typename Request, typename Response>
absl::Status Call(Conn&& conn, uint16_t kind, const Request& request, Response* response) {
  Request meta;
  std::vector<absl::string_view> payloads;
  SplitRequest(request, &meta, &payloads);
  absl::Status s = WriteFrame(conn, kind, 0, meta.SerializeAsString(), payloads, Soon());
  if (!s.ok()) return s;
  return ReadAnswer(conn, response);
}

// The floats of the first tensor pulled.
inline std::vector<float> Floats(const PullResponse& pulled) {
  std::vector<float> out;
  if (pulled.tensors_size() == 0) return out;
  const std::string& data = pulled.tensors(0).tensor().data();
  out.resize(data.size() / 4);
  std::memcpy(out.data(), data.data(), out.size() * 4);
  return out;
}

}  // namespace data_plane_test
}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_TEST_UTIL_H_
