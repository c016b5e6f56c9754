#include "bench/data_plane_cluster.h"

#include <prometheus/registry.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/ps_client.h"
#include "common/tensor.h"
#include "ps/core/variable_store.h"
#include "ps/service/data_plane_wire.h"
#include "rpc/frame_socket.h"
#include "rpc/test_certs.h"

namespace pscluster {

// The job namespace the benchmark's variables live in (keyless: no coordinator).
constexpr char kBenchJob[] = "bench";
namespace bench {

bool ParseShape(const std::string& text, ClusterShape* shape) {
  const std::vector<std::string> parts = absl::StrSplit(text, 'x');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &shape->ps) ||
      !absl::SimpleAtoi(parts[1], &shape->workers) || shape->ps < 1 || shape->ps > kMaxPs ||
      shape->workers < 1 || shape->workers > kMaxWorkers) {
    return false;
  }
  shape->label = absl::StrCat(shape->ps, "x", shape->workers);
  return true;
}

absl::StatusOr<std::unique_ptr<Cluster>> StartCluster(const ClusterShape& shape,
                                                      const std::vector<int64_t>& sizes,
                                                      int tcp_buffer_bytes, int stripes,
                                                      const std::string& pslite_bench) {
  auto c = std::make_unique<Cluster>();
  c->shape = shape;
  const int num_ps = shape.ps;
  if (!pslite_bench.empty()) {
    auto pslite = PsliteLauncher::Start(pslite_bench, shape.ps, shape.workers, kCallTimeout);
    if (!pslite.ok()) {
      return absl::Status(pslite.status().code(),
                          absl::StrCat("ps-lite: ", pslite.status().message()));
    }
    c->pslite = *std::move(pslite);
  }
  const TestCert ca = MakeTestCa("bench-cluster-ca");  // for kPsclusterTls
  for (int p = 0; p < num_ps; ++p) {
    // Naive gRPC: the same StartServer/MakeChannel (message limits, health
    // service) as pscluster, so only the service differs.
    c->echo_services.push_back(std::make_unique<EchoServiceImpl>());
    auto echo_server = StartServer(ServerOptions(), {c->echo_services.back().get()}, nullptr);
    if (!echo_server.ok()) {
      return absl::Status(echo_server.status().code(),
                          absl::StrCat("echo server: ", echo_server.status().message()));
    }
    c->echo_servers.push_back(*std::move(echo_server));
    // pscluster: wired as ps/main.cc wires a ps_server, metrics included;
    // each PS has its own store and registry, as separate processes would.
    auto registry = std::make_shared<prometheus::Registry>();
    VariableStore::Options store_options;
    store_options.registry = registry;
    c->stores.push_back(std::make_unique<JobStores>(store_options));
    c->ps_services.push_back(
        std::make_unique<ParameterServerService>(c->stores.back().get(), registry));
    auto ps_server = StartServer(ServerOptions(), {c->ps_services.back().get()}, registry);
    if (!ps_server.ok()) {
      return absl::Status(ps_server.status().code(),
                          absl::StrCat("ps server: ", ps_server.status().message()));
    }
    c->ps_servers.push_back(*std::move(ps_server));
    auto data_plane = DataPlaneServer::Start(DataPlaneServer::Options(), c->stores.back().get(),
                                             c->ps_services.back()->handler());
    if (!data_plane.ok()) {
      return absl::Status(data_plane.status().code(),
                          absl::StrCat("data plane: ", data_plane.status().message()));
    }
    c->ps_services.back()->set_data_plane(data_plane->get());
    c->data_planes.push_back(*std::move(data_plane));
    DataPlaneServer::Options tls_options;
    auto tls = TlsContext::Create(TlsContext::Side::kServer,
                                  TestPem(ca, MakeTestCert(ca, absl::StrCat("ps", p), "ps")));
    if (!tls.ok()) return tls.status();
    tls_options.tls = std::move(*tls);
    auto tls_plane =
        DataPlaneServer::Start(tls_options, c->stores.back().get(), c->ps_services.back()->handler());
    if (!tls_plane.ok()) {
      return absl::Status(tls_plane.status().code(),
                          absl::StrCat("TLS data plane: ", tls_plane.status().message()));
    }
    c->tls_data_planes.push_back(*std::move(tls_plane));
  }
  auto worker_tls = TlsContext::Create(TlsContext::Side::kClient,
                                       TestPem(ca, MakeTestCert(ca, "worker", "worker")));
  if (!worker_tls.ok()) return worker_tls.status();
  c->connections.resize(static_cast<size_t>(shape.workers * num_ps));
  for (int w = 0; w < shape.workers; ++w) {
    for (int p = 0; p < num_ps; ++p) {
      Connection& conn = c->connection(w, p);
      auto tcp = TcpPingPong::Create(tcp_buffer_bytes, kCallTimeout);
      if (!tcp.ok()) {
        return absl::Status(tcp.status().code(), absl::StrCat("raw TCP: ", tcp.status().message()));
      }
      conn.tcp = *std::move(tcp);
      conn.echo_stub = bench::EchoService::NewStub(
          MakeChannel(absl::StrCat("127.0.0.1:", c->echo_servers[p]->port())));
      RemotePsClient::Options client_options;
      client_options.target = absl::StrCat("127.0.0.1:", c->ps_servers[p]->port());
      client_options.call_timeout = kCallTimeout;
      conn.ps_client = std::make_unique<RemotePsClient>(client_options);
      RemotePsClient::Options grpc_options = client_options;
      grpc_options.data_plane = false;
      conn.grpc_client = std::make_unique<RemotePsClient>(grpc_options);
      auto tls_fd = DialTcp("127.0.0.1", c->tls_data_planes[p]->port(),
                            absl::Now() + absl::Seconds(10));
      if (!tls_fd.ok()) return tls_fd.status();
      auto tls_stream = (*worker_tls)->Connect(std::move(*tls_fd), "127.0.0.1",
                                               absl::Now() + absl::Seconds(10));
      if (!tls_stream.ok()) return tls_stream.status();
      conn.tls = std::move(*tls_stream);
      if (stripes > 1) {
        for (int k = 0; k < stripes; ++k) {
          conn.stripe_clients.push_back(std::make_unique<RemotePsClient>(client_options));
        }
        conn.stripe_pushed.resize(static_cast<size_t>(stripes));
      }
    }
  }

  // Requests are built once, outside the timing. The last shard would take
  // the remainder of an uneven split; sizes are whole shards instead (N/P
  // rounded down to 4 bytes), and throughput counts the bytes actually sent.
  c->shards.resize(sizes.size());
  std::vector<CreateVariablesRequest> creates(static_cast<size_t>(num_ps));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t shard_bytes = sizes[i] / num_ps / 4 * 4;
    const std::string name = absl::StrCat("w_", sizes[i]);
    c->shards[i].resize(static_cast<size_t>(num_ps));
    for (int p = 0; p < num_ps; ++p) {
      Shard& shard = c->shards[i][p];
      shard.bytes = shard_bytes;
      shard.payload.assign(static_cast<size_t>(shard_bytes), '\x5a');
      shard.echo_request.set_data(shard.payload);
      VariableSpecProto* spec = creates[p].add_variables();
      spec->set_name(name);
      spec->set_dtype(DT_FLOAT32);
      spec->add_shape(shard_bytes / 4);
      spec->mutable_initializer()->set_type("zeros");
      spec->mutable_optimizer()->set_type("sgd");
      spec->mutable_optimizer()->set_learning_rate(0.01f);
      shard.push.set_job(kBenchJob);
      shard.pull.set_job(kBenchJob);
      NamedTensor* gradient = shard.push.add_gradients();
      gradient->set_name(name);
      EncodeTensor(Shape{shard_bytes / 4},
                   std::vector<float>(static_cast<size_t>(shard_bytes / 4), 1e-3f),
                   gradient->mutable_tensor());
      shard.pull.add_names(name);
      shard.push_pull = shard.push;
      *shard.push_pull.mutable_pull() = shard.pull;
      if (stripes > 1) {
        const int64_t stripe_elements = std::max<int64_t>(1, shard_bytes / 4 / stripes);
        for (int k = 0; k < stripes; ++k) {
          const std::string stripe_name = absl::StrCat(name, "_s", k);
          VariableSpecProto* stripe_spec = creates[p].add_variables();
          *stripe_spec = *spec;
          stripe_spec->set_name(stripe_name);
          stripe_spec->set_shape(0, stripe_elements);
          PushRequest& req = shard.stripes.emplace_back();
          req.set_job(kBenchJob);
          NamedTensor* g = req.add_gradients();
          g->set_name(stripe_name);
          EncodeTensor(Shape{stripe_elements},
                       std::vector<float>(static_cast<size_t>(stripe_elements), 1e-3f),
                       g->mutable_tensor());
          req.mutable_pull()->add_names(stripe_name);
          shard.stripe_bytes += stripe_elements * 4;
        }
      }
    }
  }
  for (int p = 0; p < num_ps; ++p) {
    creates[p].set_job(kBenchJob);
    CreateVariablesResponse created;
    if (absl::Status s = c->connection(0, p).ps_client->CreateVariables(creates[p], &created);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("CreateVariables: ", s.message()));
    }
  }
  return c;
}

namespace {

absl::Status CheckPulled(const PullResponse& pulled, int64_t bytes, const char* what) {
  if (pulled.tensors_size() != 1 ||
      static_cast<int64_t>(pulled.tensors(0).tensor().data().size()) != bytes) {
    return absl::InternalError(absl::StrCat(what, " returned the wrong size"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RoundTrip(Cluster& c, Path path, size_t size_index, int worker) {
  if (path == kRawTcp) {
    for (int p = 0; p < c.shape.ps; ++p) {
      Connection& conn = c.connection(worker, p);
      conn.tcp_reply.resize(c.shards[size_index][p].payload.size());
      if (absl::Status s = conn.tcp->Send(c.shards[size_index][p].payload); !s.ok()) return s;
    }
    for (int p = 0; p < c.shape.ps; ++p) {
      Connection& conn = c.connection(worker, p);
      if (absl::Status s = conn.tcp->Receive(&conn.tcp_reply); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (path == kPscluster || path == kPsclusterGrpc) {
    // As worker/core/trainer.cc: every PS's push (carrying its pull) is in
    // flight before the first is waited for.
    const bool grpc = path == kPsclusterGrpc;
    std::vector<std::unique_ptr<PendingPsCall>> calls(static_cast<size_t>(c.shape.ps));
    for (int p = 0; p < c.shape.ps; ++p) {
      Connection& conn = c.connection(worker, p);
      calls[p] = (grpc ? conn.grpc_client : conn.ps_client)
                     ->StartPush(c.shards[size_index][p].push_pull,
                                 grpc ? &conn.grpc_pushed : &conn.pushed);
    }
    absl::Status status;
    for (int p = 0; p < c.shape.ps; ++p) {
      absl::Status s = calls[p]->Wait();
      if (s.ok()) {
        const Connection& conn = c.connection(worker, p);
        s = CheckPulled((grpc ? conn.grpc_pushed : conn.pushed).pulled(),
                        c.shards[size_index][p].bytes, "push+pull");
      }
      status.Update(s);
    }
    return status;
  }
  if (path == kPsclusterTls) {
    // As DataPlaneClient: each PS's request frame written (meta serialized
    // per call), then the answers read.
    const absl::Time deadline = absl::Now() + absl::FromChrono(kCallTimeout);
    for (int p = 0; p < c.shape.ps; ++p) {
      PushRequest meta;
      std::vector<absl::string_view> payloads;
      SplitRequest(c.shards[size_index][p].push_pull, &meta, &payloads);
      if (absl::Status s = WriteFrame(*c.connection(worker, p).tls, kDataPlanePush, 0,
                                      meta.SerializeAsString(), payloads, deadline);
          !s.ok()) {
        return s;
      }
    }
    for (int p = 0; p < c.shape.ps; ++p) {
      Connection& conn = c.connection(worker, p);
      FrameHead head;
      bool closed = false;
      if (absl::Status s = ReadFrameHead(*conn.tls, int64_t{1} << 31, deadline,
                                         absl::FromChrono(kCallTimeout), &head, &closed);
          !s.ok()) {
        return s;
      }
      if (head.code != 0) return absl::InternalError(absl::StrCat("TLS data plane: ", head.meta));
      if (absl::Status s = ReceiveMessage(*conn.tls, head, &conn.tls_pushed, deadline); !s.ok()) {
        return s;
      }
      if (absl::Status s =
              CheckPulled(conn.tls_pushed.pulled(), c.shards[size_index][p].bytes, "TLS push+pull");
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (path == kPsclusterStriped) {
    std::vector<std::unique_ptr<PendingPsCall>> calls;
    for (int p = 0; p < c.shape.ps; ++p) {
      Connection& conn = c.connection(worker, p);
      const Shard& shard = c.shards[size_index][p];
      for (size_t k = 0; k < shard.stripes.size(); ++k) {
        calls.push_back(
            conn.stripe_clients[k]->StartPush(shard.stripes[k], &conn.stripe_pushed[k]));
      }
    }
    absl::Status status;
    for (auto& call : calls) status.Update(call->Wait());
    return status;
  }
  for (int p = 0; p < c.shape.ps; ++p) {
    const Shard& shard = c.shards[size_index][p];
    Connection& conn = c.connection(worker, p);
    switch (path) {
      case kNaiveGrpc: {
        grpc::ClientContext context;
        SetDeadline(&context, kCallTimeout);
        bench::BytesMessage response;
        grpc::Status s = conn.echo_stub->Echo(&context, shard.echo_request, &response);
        if (!s.ok()) return FromGrpcStatus(s);
        if (static_cast<int64_t>(response.data().size()) != shard.bytes) {
          return absl::InternalError("echo returned the wrong size");
        }
        break;
      }
      case kPsclusterTwoCalls:
      default: {
        if (absl::Status s = conn.ps_client->Push(shard.push, &conn.pushed); !s.ok()) return s;
        if (absl::Status s = conn.ps_client->Pull(shard.pull, &conn.pulled); !s.ok()) return s;
        if (absl::Status s = CheckPulled(conn.pulled, shard.bytes, "pull"); !s.ok()) return s;
        break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace pscluster
