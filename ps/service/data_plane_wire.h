// How Push and Pull travel on the raw data plane (ps/service/data_plane_server.h):
// each request or answer is one frame (rpc/frame_socket.h) whose meta is the
// message with every tensor's bytes left out, and whose payloads are those
// bytes, in a fixed order:
//
//   PushRequest:  gradients[i].tensor.data (each present tensor), then per
//                 sparse[i]: ids, rows.data (when rows is present), then the
//                 fused pull's lookups[i].ids.
//   PullRequest:  lookups[i].ids.
//   PullResponse: tensors[i].tensor.data, then rows[i].tensor.data.
//   PushResponse: its `pulled` PullResponse's, when present.
//
// The receiver parses the meta, then reads each payload straight into the
// string of the field it belongs to. Messages reused from one call to the
// next (pooled requests, a worker's per-step responses) keep those strings'
// buffers: ReceiveMessage moves them aside before parsing and back after, so
// a tensor of the same size as last time is read into memory that is already
// there, with no allocation and no zero-fill. A payload larger than the
// buffer kept for it is not allocated at the size the frame announces: the
// buffer grows as its bytes arrive (ReadGrowing, rpc/frame_socket.h).
#ifndef PSCLUSTER_PS_SERVICE_DATA_PLANE_WIRE_H_
#define PSCLUSTER_PS_SERVICE_DATA_PLANE_WIRE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "protos/ps.pb.h"
#include "rpc/frame_socket.h"

namespace pscluster {

// Frame kinds.
enum DataPlaneKind : uint16_t {
  kDataPlanePush = 1,
  kDataPlanePull = 2,
  kDataPlaneAnswer = 3,  // code OK: the response; otherwise meta is the error message
};

// The fields a message's payloads belong to, in wire order (above).
void PayloadFields(PushRequest* m, std::vector<std::string*>* out);
void PayloadFields(PullRequest* m, std::vector<std::string*>* out);
void PayloadFields(PushResponse* m, std::vector<std::string*>* out);
void PayloadFields(PullResponse* m, std::vector<std::string*>* out);

// A request's meta (the message without its tensors' bytes) and its payloads,
// which point into `request`: it must outlive the write.
void SplitRequest(const PushRequest& request, PushRequest* meta,
                  std::vector<absl::string_view>* payloads);
void SplitRequest(const PullRequest& request, PullRequest* meta,
                  std::vector<absl::string_view>* payloads);

// Writes `message` (a response the caller owns) as one frame of `kind`: its
// payload strings are moved aside while the meta is serialized and put back
// before returning, so `message` is unchanged.
template <typename Message>
absl::Status WriteMessage(FrameStream& stream, uint16_t kind, Message* message,
                          absl::Time deadline);

// Parses the frame whose head was just read into `message`, reading its
// payloads from `stream` into `message`'s fields. INVALID_ARGUMENT when the meta
// does not parse or announces other payloads than the frame carries (the
// connection is then out of step: close it); `grow`'s status when it refuses
// a buffer's growth.
template <typename Message>
absl::Status ReceiveMessage(FrameStream& stream, const FrameHead& head, Message* message,
                            absl::Time deadline, const FrameGrowth& grow = {});

// ReceiveMessage in two steps, for a server that checks the request's meta
// before it reads (and allocates for) any payload. ParseFrameMeta parses the
// meta into `message`, setting its payload fields' buffers aside in `*kept`
// (INVALID_ARGUMENT as ReceiveMessage); ReadFramePayloads then reads the
// payloads into those buffers. Not calling ReadFramePayloads leaves the
// connection out of step (the payloads unread) and `message`'s payload fields
// empty; the buffers in `*kept` are freed with it.
template <typename Message>
absl::Status ParseFrameMeta(const FrameHead& head, Message* message,
                            std::vector<std::string>* kept);
template <typename Message>
absl::Status ReadFramePayloads(FrameStream& stream, const FrameHead& head, Message* message,
                               std::vector<std::string>* kept, absl::Time deadline,
                               const FrameGrowth& grow = {});

// The above on a plaintext socket `fd` (the caller keeps it).
template <typename Message>
absl::Status WriteMessage(int fd, uint16_t kind, Message* message, absl::Time deadline) {
  FdStream stream(fd);
  return WriteMessage(stream, kind, message, deadline);
}
template <typename Message>
absl::Status ReceiveMessage(int fd, const FrameHead& head, Message* message, absl::Time deadline,
                            const FrameGrowth& grow = {}) {
  FdStream stream(fd);
  return ReceiveMessage(stream, head, message, deadline, grow);
}
template <typename Message>
absl::Status ReadFramePayloads(int fd, const FrameHead& head, Message* message,
                               std::vector<std::string>* kept, absl::Time deadline,
                               const FrameGrowth& grow = {}) {
  FdStream stream(fd);
  return ReadFramePayloads(stream, head, message, kept, deadline, grow);
}

}  // namespace pscluster

#endif  // PSCLUSTER_PS_SERVICE_DATA_PLANE_WIRE_H_
