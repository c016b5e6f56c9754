// Signing and checking control requests (common/update_lease.h, ControlMac)
// for protobuf requests: the MAC covers the method name and the request's
// deterministic serialization with its MAC field cleared, so any change to
// any field (the job, a checkpoint name, a closure id) breaks it.
//
// A request type R names its MAC field with a traits struct below; the PS
// requests carry ControlAuth `auth` (protos/ps.proto), the worker's SetupJob
// and RunClosure a bytes `auth` (protos/worker.proto).
//
// Replays: a MAC proves who made a request, not when. In plaintext an
// attacker who can read the traffic also reads the job key (CreateVariables
// carries it), so only TLS protects against a reader; against a stranger who
// can only connect, a MAC is unforgeable, and a replayed request of the
// job's own coordinator is idempotent (the same prune, the same end, a Save
// of a name that now exists: refused).
#ifndef PSCLUSTER_COMMON_CONTROL_AUTH_H_
#define PSCLUSTER_COMMON_CONTROL_AUTH_H_

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message_lite.h>

#include <string>

#include "absl/strings/string_view.h"
#include "common/update_lease.h"

namespace pscluster {

// --- The MAC fields of each request type: for a ControlAuth `auth` field
// (the PS's requests) and a bytes `auth` field (the worker's); SetupJob's
// `release` is cleared too, as it is a MAC of the same bytes.
template <typename R>
auto ClearRelease(R* r, int) -> decltype(r->clear_release(), void()) {
  r->clear_release();
}
template <typename R>
void ClearRelease(R*, long) {}

template <typename R>
auto ClearMacFields(R* r) -> decltype(r->mutable_auth()->clear_mac(), void()) {
  r->clear_auth();
}
template <typename R>
auto ClearMacFields(R* r) -> decltype(r->mutable_auth()->clear(), void()) {
  r->clear_auth();
  ClearRelease(r, 0);
}
template <typename R>
auto SetMac(R* r, const std::string& mac) -> decltype(r->mutable_auth()->assign(mac), void()) {
  r->set_auth(mac);
}
template <typename R>
auto GetMac(const R& r) -> decltype(r.auth().size(), std::string()) {
  return r.auth();
}
template <typename R>
auto SetMac(R* r, const std::string& mac) -> decltype(r->mutable_auth()->set_mac(mac), void()) {
  r->mutable_auth()->set_mac(mac);
}
template <typename R>
auto GetMac(const R& r) -> decltype(r.auth().mac(), std::string()) {
  return r.auth().mac();
}

// The deterministic serialization of `message`.
inline std::string DeterministicBytes(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

// ControlMac of `request` with its auth field cleared. R has
// mutable_auth()->mac() (a ControlAuth) or auth() as bytes; both handled by
// the overloads above.
template <typename R>
std::string RequestMac(absl::string_view key, absl::string_view method, const R& request) {
  R copy = request;
  ClearMacFields(&copy);
  return ControlMac(key, method, DeterministicBytes(copy));
}

// Signs `request` under `key` for `method`.
template <typename R>
void SignRequest(absl::string_view key, absl::string_view method, R* request) {
  SetMac(request, RequestMac(key, method, *request));
}

// True if `mac` is RequestMac(key, method, request); constant time.
template <typename R>
bool CheckRequestMac(absl::string_view key, absl::string_view method, const R& request,
                     absl::string_view mac) {
  R copy = request;
  ClearMacFields(&copy);
  return CheckControlMac(key, method, DeterministicBytes(copy), mac);
}

// True if `request` carries RequestMac(key, method, request).
template <typename R>
bool CheckRequest(absl::string_view key, absl::string_view method, const R& request) {
  return CheckRequestMac(key, method, request, GetMac(request));
}

}  // namespace pscluster

#endif  // PSCLUSTER_COMMON_CONTROL_AUTH_H_
