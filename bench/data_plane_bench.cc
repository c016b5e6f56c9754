// data_plane_bench: pscluster's dense data plane (Push + Pull of one float32
// variable through GrpcPsClient to a real ParameterServerService) measured
// against its two ceilings in one process run:
//   raw TCP     - blocking-socket ping-pong over 127.0.0.1, 1 connection;
//   naive gRPC  - a bare unary Echo(bytes) service, nothing tuned;
//   pscluster   - VariableStore + ParameterServerService + GrpcPsClient.
// Each path sends N bytes and gets N bytes back per round trip, so its
// throughput is 2N / round-trip time (1 GB = 1e9 B). Points are interleaved
// (repeat -> size -> path) and each cell is the median over repeats, so slow
// drift of a noisy machine hits all three paths alike.
//
// All servers run in threads of this process on loopback; see README.md.
// Exit codes: 0 on success, 1 if a server cannot start or a call fails,
// 2 for invalid flags.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench.grpc.pb.h"
#include "bench/bench_util.h"
#include "common/tensor.h"
#include "protos/ps.pb.h"
#include "ps/core/variable_store.h"
#include "ps/service/grpc_ps_client.h"
#include "ps/service/ps_service.h"
#include "rpc/rpc_util.h"

ABSL_FLAG(std::vector<std::string>, sizes,
          std::vector<std::string>({"4096", "65536", "1048576", "4194304", "16777216", "67108864"}),
          "Payload sizes N in bytes (float32, so multiples of 4), comma-separated.");
ABSL_FLAG(int, repeats, 5, "Interleaved repeats per point; each cell is their median.");
ABSL_FLAG(double, seconds_per_point, 1.0,
          "Time each (repeat, size, path) point runs for; a point always does at least one "
          "round trip, so a round trip slower than this gives a one-round-trip point.");
ABSL_FLAG(int64_t, max_iterations, 100000, "Cap on round trips per point.");
ABSL_FLAG(int, tcp_buffer_bytes, 4 << 20,
          "SO_SNDBUF/SO_RCVBUF of the raw TCP sockets (the kernel doubles it); 0 leaves the "
          "kernel's autotuning alone.");
ABSL_FLAG(std::string, output_json, "", "If set, the results are also written here as JSON.");

namespace pscluster {
namespace {

constexpr int kExitBadFlags = 2;

// ---------------------------------------------------------------------------
// Raw TCP ping-pong: the ceiling.

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(errno)));
}

absl::Status SetSocketOptions(int fd, int buffer_bytes) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return Errno("TCP_NODELAY");
  }
  if (buffer_bytes > 0) {
    // SO_*BUFFORCE (root) may exceed net.core.[rw]mem_max; else fall back.
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer_bytes, sizeof(buffer_bytes)) != 0 &&
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes)) != 0) {
      return Errno("SO_SNDBUF");
    }
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof(buffer_bytes)) != 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes)) != 0) {
      return Errno("SO_RCVBUF");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadFull(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = recv(fd, data, size, 0);
    if (n == 0) return absl::UnavailableError("connection closed");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("recv");
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("send");
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// One connection over 127.0.0.1. Each round trip: the client sends an 8-byte
// length and N bytes; the server thread reads all N, then sends them back.
// Not thread-safe: one caller at a time.
class TcpPingPong {
 public:
  static absl::StatusOr<std::unique_ptr<TcpPingPong>> Create(int buffer_bytes) {
    auto p = std::unique_ptr<TcpPingPong>(new TcpPingPong());
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) return Errno("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    // Buffer sizes are set before listen/connect so the window scale fits them.
    absl::Status s = SetSocketOptions(listener, buffer_bytes);
    if (s.ok() && (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
                   listen(listener, 1) != 0 ||
                   getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)) {
      s = Errno("bind/listen on 127.0.0.1:0");
    }
    if (s.ok()) {
      p->client_fd_ = socket(AF_INET, SOCK_STREAM, 0);
      if (p->client_fd_ < 0) s = Errno("socket");
    }
    if (s.ok()) s = SetSocketOptions(p->client_fd_, buffer_bytes);
    if (s.ok() && connect(p->client_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      s = Errno("connect");
    }
    if (s.ok()) {
      p->server_fd_ = accept(listener, nullptr, nullptr);
      if (p->server_fd_ < 0) s = Errno("accept");
    }
    if (s.ok()) s = SetSocketOptions(p->server_fd_, buffer_bytes);
    close(listener);
    if (!s.ok()) return s;
    p->server_ = std::thread([fd = p->server_fd_] { Serve(fd); });
    return p;
  }

  ~TcpPingPong() {
    if (client_fd_ >= 0) {
      const uint64_t stop = 0;
      (void)WriteFull(client_fd_, reinterpret_cast<const char*>(&stop), sizeof(stop));
    }
    if (server_.joinable()) server_.join();
    if (client_fd_ >= 0) close(client_fd_);
    if (server_fd_ >= 0) close(server_fd_);
  }

  // REQUIRES: data.size() > 0; `reply` is resized to data.size().
  absl::Status RoundTrip(const std::string& data, std::string* reply) {
    const uint64_t size = data.size();
    absl::Status s = WriteFull(client_fd_, reinterpret_cast<const char*>(&size), sizeof(size));
    if (s.ok()) s = WriteFull(client_fd_, data.data(), data.size());
    reply->resize(data.size());
    if (s.ok()) s = ReadFull(client_fd_, &(*reply)[0], reply->size());
    return s;
  }

 private:
  TcpPingPong() = default;

  // Echoes until a zero length or an error.
  static void Serve(int fd) {
    std::string buffer;
    while (true) {
      uint64_t size = 0;
      if (!ReadFull(fd, reinterpret_cast<char*>(&size), sizeof(size)).ok() || size == 0) return;
      buffer.resize(size);
      if (!ReadFull(fd, &buffer[0], size).ok()) return;
      if (!WriteFull(fd, buffer.data(), size).ok()) return;
    }
  }

  int client_fd_ = -1;
  int server_fd_ = -1;
  std::thread server_;
};

// ---------------------------------------------------------------------------
// Naive gRPC: unary Echo with a protobuf `bytes` payload.

class EchoServiceImpl final : public bench::EchoService::Service {
 public:
  grpc::Status Echo(grpc::ServerContext*, const bench::BytesMessage* request,
                    bench::BytesMessage* response) override {
    *response->mutable_data() = request->data();
    return grpc::Status::OK;
  }
};

// ---------------------------------------------------------------------------
// Measurement.

enum Path { kRawTcp = 0, kNaiveGrpc = 1, kPscluster = 2, kNumPaths = 3 };
constexpr const char* kPathNames[kNumPaths] = {"raw_tcp", "naive_grpc", "pscluster"};

// One round trip of `bytes` out and `bytes` back on one path.
using RoundTripFn = std::function<absl::Status()>;

// Runs round trips for about `seconds` (at least one, at most
// `max_iterations`); returns push+pull throughput in GB/s.
absl::StatusOr<double> MeasureGBps(int64_t bytes, const RoundTripFn& round_trip, double seconds,
                                   int64_t max_iterations) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  int64_t iterations = 0;
  double elapsed = 0;
  do {
    absl::Status s = round_trip();
    if (!s.ok()) return s;
    ++iterations;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds && iterations < max_iterations);
  return 2.0 * static_cast<double>(bytes) * static_cast<double>(iterations) / elapsed / 1e9;
}

using bench::CpuModel;
using bench::JsonString;
using bench::Median;
using bench::SizeLabel;

struct Point {
  int64_t bytes = 0;
  std::vector<double> gbps[kNumPaths];  // One per repeat.
};

// Everything each path needs for one size, built before timing starts.
struct SizeSetup {
  std::string payload;  // N bytes, for raw TCP.
  std::string reply;
  bench::BytesMessage echo_request;
  PushRequest push;
  PullRequest pull;
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Push+pull throughput of pscluster's dense data plane against raw TCP and naive gRPC.\n"
      "  data_plane_bench [--sizes=4096,...] [--repeats=5] [--seconds_per_point=1.0] "
      "[--output_json=PATH]");
  absl::ParseCommandLine(argc, argv);

  std::vector<int64_t> sizes;
  for (const std::string& s : absl::GetFlag(FLAGS_sizes)) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n <= 0 || n % 4 != 0 || n > (int64_t{1} << 29)) {
      std::cerr << "data_plane_bench: --sizes: \"" << s
                << "\" is not a positive multiple of 4 bytes up to 512 MiB\n";
      return kExitBadFlags;
    }
    sizes.push_back(n);
  }
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const double seconds = absl::GetFlag(FLAGS_seconds_per_point);
  const int64_t max_iterations = absl::GetFlag(FLAGS_max_iterations);
  if (sizes.empty() || repeats < 1 || seconds < 0 || max_iterations < 1) {
    std::cerr << "data_plane_bench: need --sizes, --repeats >= 1, --seconds_per_point >= 0 and "
                 "--max_iterations >= 1\n";
    return kExitBadFlags;
  }

  // Raw TCP.
  auto tcp = TcpPingPong::Create(absl::GetFlag(FLAGS_tcp_buffer_bytes));
  if (!tcp.ok()) {
    std::cerr << "data_plane_bench: raw TCP: " << tcp.status() << "\n";
    return 1;
  }

  // Naive gRPC: the same StartServer/MakeChannel (message limits, health
  // service) as pscluster, so only the service differs.
  EchoServiceImpl echo_service;
  auto echo_server = StartServer(ServerOptions(), {&echo_service}, nullptr);
  if (!echo_server.ok()) {
    std::cerr << "data_plane_bench: echo server: " << echo_server.status() << "\n";
    return 1;
  }
  auto echo_stub =
      bench::EchoService::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", (*echo_server)->port())));

  // pscluster: wired as ps/main.cc wires a ps_server, metrics included.
  auto registry = std::make_shared<prometheus::Registry>();
  VariableStore::Options store_options;
  store_options.registry = registry;
  VariableStore store(store_options);
  ParameterServerService ps_service(&store, registry);
  auto ps_server = StartServer(ServerOptions(), {&ps_service}, registry);
  if (!ps_server.ok()) {
    std::cerr << "data_plane_bench: ps server: " << ps_server.status() << "\n";
    return 1;
  }
  GrpcPsClient::Options client_options;
  client_options.target = absl::StrCat("127.0.0.1:", (*ps_server)->port());
  client_options.call_timeout = std::chrono::minutes(5);
  GrpcPsClient ps_client(client_options);

  // One variable per size; requests are built once, outside the timing.
  std::vector<SizeSetup> setups(sizes.size());
  CreateVariablesRequest create;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const std::string name = absl::StrCat("w_", n);
    SizeSetup& setup = setups[i];
    setup.payload.assign(static_cast<size_t>(n), '\x5a');
    setup.echo_request.set_data(setup.payload);
    VariableSpecProto* spec = create.add_variables();
    spec->set_name(name);
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(n / 4);
    spec->mutable_initializer()->set_type("zeros");
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(0.01f);
    NamedTensor* gradient = setup.push.add_gradients();
    gradient->set_name(name);
    EncodeTensor(Shape{n / 4}, std::vector<float>(static_cast<size_t>(n / 4), 1e-3f),
                 gradient->mutable_tensor());
    setup.pull.add_names(name);
  }
  CreateVariablesResponse created;
  if (absl::Status s = ps_client.CreateVariables(create, &created); !s.ok()) {
    std::cerr << "data_plane_bench: CreateVariables: " << s << "\n";
    return 1;
  }

  auto round_trip = [&](Path path, SizeSetup& setup) -> RoundTripFn {
    switch (path) {
      case kRawTcp:
        return [&] { return (*tcp)->RoundTrip(setup.payload, &setup.reply); };
      case kNaiveGrpc:
        return [&]() -> absl::Status {
          grpc::ClientContext context;
          bench::BytesMessage response;
          grpc::Status s = echo_stub->Echo(&context, setup.echo_request, &response);
          if (!s.ok()) return FromGrpcStatus(s);
          if (response.data().size() != setup.payload.size()) {
            return absl::InternalError("echo returned the wrong size");
          }
          return absl::OkStatus();
        };
      case kPscluster:
      default:
        return [&]() -> absl::Status {
          PushResponse pushed;
          if (absl::Status s = ps_client.Push(setup.push, &pushed); !s.ok()) return s;
          PullResponse pulled;
          if (absl::Status s = ps_client.Pull(setup.pull, &pulled); !s.ok()) return s;
          if (pulled.tensors_size() != 1 ||
              pulled.tensors(0).tensor().data().size() != setup.payload.size()) {
            return absl::InternalError("pull returned the wrong size");
          }
          return absl::OkStatus();
        };
    }
  };

  // One untimed round trip per (size, path): connections up, buffers grown.
  for (SizeSetup& setup : setups) {
    for (int p = 0; p < kNumPaths; ++p) {
      if (absl::Status s = round_trip(static_cast<Path>(p), setup)(); !s.ok()) {
        std::cerr << "data_plane_bench: warm-up " << kPathNames[p] << ": " << s << "\n";
        return 1;
      }
    }
  }

  std::vector<Point> points(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) points[i].bytes = sizes[i];
  for (int r = 0; r < repeats; ++r) {
    std::cerr << "repeat " << (r + 1) << "/" << repeats << "\n";
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (int p = 0; p < kNumPaths; ++p) {
        absl::StatusOr<double> gbps = MeasureGBps(
            sizes[i], round_trip(static_cast<Path>(p), setups[i]), seconds, max_iterations);
        if (!gbps.ok()) {
          std::cerr << "data_plane_bench: " << kPathNames[p] << " " << SizeLabel(sizes[i]) << ": "
                    << gbps.status() << "\n";
          return 1;
        }
        points[i].gbps[p].push_back(*gbps);
      }
    }
  }

  const std::string date = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  const std::string cpu = CpuModel();
  const unsigned cores = std::thread::hardware_concurrency();

  std::cout << absl::StrFormat(
      "Machine: %u CPUs, %s. Date: %s. Median of %d interleaved repeats, %.2f s per point.\n"
      "Push+pull throughput, GB/s (2N bytes per round trip, 1 GB = 1e9 B).\n\n",
      cores, cpu, date, repeats, seconds);
  std::cout << "| size | raw TCP GB/s | naive gRPC GB/s | pscluster GB/s | pscluster/raw TCP | "
               "pscluster/naive gRPC |\n|---|---|---|---|---|---|\n";
  std::vector<std::string> json_points;
  for (const Point& point : points) {
    double median[kNumPaths];
    for (int p = 0; p < kNumPaths; ++p) median[p] = Median(point.gbps[p]);
    const double vs_tcp = median[kPscluster] / median[kRawTcp];
    const double vs_grpc = median[kPscluster] / median[kNaiveGrpc];
    std::cout << absl::StrFormat("| %s | %.3f | %.3f | %.3f | %.2f | %.2f |\n",
                                 SizeLabel(point.bytes), median[kRawTcp], median[kNaiveGrpc],
                                 median[kPscluster], vs_tcp, vs_grpc);
    std::vector<std::string> fields = {absl::StrCat("\"bytes\": ", point.bytes)};
    for (int p = 0; p < kNumPaths; ++p) {
      fields.push_back(absl::StrFormat("\"%s_gbps\": %.6g", kPathNames[p], median[p]));
      fields.push_back(
          absl::StrFormat("\"%s_gbps_repeats\": [%s]", kPathNames[p],
                          absl::StrJoin(point.gbps[p], ", ", [](std::string* out, double v) {
                            absl::StrAppend(out, absl::StrFormat("%.6g", v));
                          })));
    }
    fields.push_back(absl::StrFormat("\"pscluster_over_raw_tcp\": %.6g", vs_tcp));
    fields.push_back(absl::StrFormat("\"pscluster_over_naive_grpc\": %.6g", vs_grpc));
    json_points.push_back(absl::StrCat("    {", absl::StrJoin(fields, ", "), "}"));
  }

  const std::string json_path = absl::GetFlag(FLAGS_output_json);
  if (!json_path.empty()) {
    const std::string json = absl::StrCat(
        "{\n  \"benchmark\": \"data_plane_bench\",\n  \"date\": ", JsonString(date),
        ",\n  \"nproc\": ", cores, ",\n  \"cpu_model\": ", JsonString(cpu),
        ",\n  \"repeats\": ", repeats, ",\n  \"seconds_per_point\": ", seconds,
        ",\n  \"unit\": \"GB/s push+pull, 2N bytes per round trip, 1 GB = 1e9 B, median\",",
        "\n  \"points\": [\n", absl::StrJoin(json_points, ",\n"), "\n  ]\n}\n");
    if (absl::Status s = WriteFileAtomically(json_path, json); !s.ok()) {
      std::cerr << "data_plane_bench: --output_json: " << s << "\n";
      return 1;
    }
  }

  (*echo_server)->Shutdown();
  (*ps_server)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
