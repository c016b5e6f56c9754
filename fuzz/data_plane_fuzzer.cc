// Fuzz target for the PS's raw data plane (ps/service/data_plane_server.h):
// each input is written as-is to a fresh TCP connection to a real
// DataPlaneServer on 127.0.0.1 (its write side then closed), as a stranger's
// bytes would arrive. Besides "no crash, no sanitizer report, no hang" it
// checks:
//   - every answer is a well-formed answer frame whose code is OK or one of
//     the request errors (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
//     PERMISSION_DENIED, FAILED_PRECONDITION, ABORTED), never INTERNAL or
//     UNKNOWN;
//   - after the input, a valid pull on a new connection still gets the
//     variable, with as many bytes as its shape says;
//   - once both connections are closed, the server lets go of them.
// The server's frame limit is 1 MiB, so inputs announcing huge tensors are
// refused before anything is allocated for them.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "protos/ps.pb.h"
#include "ps/core/job_stores.h"
#include "ps/service/data_plane_server.h"
#include "ps/service/data_plane_wire.h"
#include "rpc/frame_socket.h"

namespace pscluster {
namespace {

struct Fixture {
  Fixture() {
    CreateVariablesRequest create;
    create.set_job("fuzz");  // as fuzz/make_ps_corpus.cc's frames
    VariableSpecProto* spec = create.add_variables();
    spec->set_name("w");
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(4);
    spec->mutable_initializer()->set_type("ones");
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(0.1f);
    CreateVariablesResponse created;
    FUZZ_CHECK(jobs.CreateVariables(create, &created).ok(), "CreateVariables");
    DataPlaneServer::Options options;
    options.max_message_bytes = 1 << 20;
    options.frame_timeout = absl::Seconds(5);
    auto started = DataPlaneServer::Start(options, &jobs, nullptr);
    FUZZ_CHECK(started.ok(), std::string(started.status().message()));
    server = std::move(*started);
  }

  JobStores jobs{VariableStore::Options()};
  std::unique_ptr<DataPlaneServer> server;
};

Fixture& GetFixture() {
  static Fixture* fixture = new Fixture();
  return *fixture;
}

UniqueFd Dial(int port) {
  absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", port, absl::Now() + absl::Seconds(5));
  FUZZ_CHECK(fd.ok(), std::string(fd.status().message()));
  return std::move(*fd);
}

bool AllowedCode(int32_t code) {
  switch (static_cast<absl::StatusCode>(code)) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace pscluster

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pscluster;  // NOLINT
  Fixture& f = GetFixture();
  {
    UniqueFd fd = Dial(f.server->port());
    // The server may close early (a bad frame): a failed send is fine.
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = send(fd.get(), data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    shutdown(fd.get(), SHUT_WR);
    // Every answer until the server closes.
    for (;;) {
      FrameHead head;
      bool closed = false;
      absl::Status s = ReadFrameHead(fd.get(), 2 << 20, absl::Now() + absl::Seconds(10),
                                     absl::Seconds(10), &head, &closed);
      if (!s.ok()) {
        // The end, or a reset that dropped an answer: never a hang.
        FUZZ_CHECK(!absl::IsDeadlineExceeded(s), "the server neither answered nor closed");
        break;
      }
      FUZZ_CHECK(head.kind == kDataPlaneAnswer, absl::StrCat("answer of kind ", head.kind));
      FUZZ_CHECK(AllowedCode(head.code), absl::StrCat("answer code ", head.code, ": ", head.meta));
      std::string scratch(head.payload_bytes, '\0');
      if (!ReadFull(fd.get(), scratch.data(), scratch.size(), head.deadline).ok()) break;
    }
  }
  // The server still answers a valid pull.
  UniqueFd fd = Dial(f.server->port());
  PullRequest pull;
  pull.set_job("fuzz");
  pull.add_names("w");
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  FUZZ_CHECK(WriteFrame(fd.get(), kDataPlanePull, 0, pull.SerializeAsString(), {}, deadline).ok(),
             "write the check pull");
  FrameHead head;
  bool closed = false;
  absl::Status s = ReadFrameHead(fd.get(), 2 << 20, deadline, absl::Seconds(10), &head, &closed);
  FUZZ_CHECK(s.ok(), absl::StrCat("check pull: ", s.message()));
  FUZZ_CHECK(head.code == 0, absl::StrCat("check pull code ", head.code, ": ", head.meta));
  PullResponse pulled;
  s = ReceiveMessage(fd.get(), head, &pulled, head.deadline);
  FUZZ_CHECK(s.ok(), absl::StrCat("check pull answer: ", s.message()));
  FUZZ_CHECK(pulled.tensors_size() == 1 && pulled.tensors(0).tensor().data().size() == 16,
             "the pulled variable has 4 floats");
  // The server lets go of every connection once its peer has gone. Waited
  // for here, so that no connection thread is still freeing this input's
  // buffers when libFuzzer counts mallocs against frees and runs its leak
  // check (a thread mid-teardown made LeakSanitizer report its 16-byte
  // FdStream once in CI).
  fd = UniqueFd();
  const absl::Time drained = absl::Now() + absl::Seconds(10);
  while (f.server->connections() > 0 && absl::Now() < drained) {
    absl::SleepFor(absl::Microseconds(200));
  }
  FUZZ_CHECK(f.server->connections() == 0,
             absl::StrCat(f.server->connections(), " connections still open 10 s after their peers "
                                                   "closed"));
  return 0;
}
