// Adapter test: a real ParameterServerService on 127.0.0.1:0, driven through
// RemotePsClient, checking that results and status codes survive the wire —
// once with Pull and Push on gRPC, once on the raw data plane
// (DataPlaneServer), which must behave the same.
#include "ps/service/ps_service.h"

#include <grpcpp/generic/generic_stub.h>
#include <prometheus/registry.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/row_ids.h"
#include "common/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/core/job_stores.h"
#include "ps/core/memory_budget.h"
#include "ps/service/data_plane_client.h"
#include "ps/service/data_plane_server.h"
#include "ps/service/data_plane_wire.h"
#include "ps/service/remote_ps_client.h"
#include "rpc/frame_socket.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The job every case addresses (keyless: the PS runs as for tools).
constexpr char kJob[] = "test-job";

StatsRequest JobStats() {
  StatsRequest request;
  request.set_job(kJob);
  return request;
}

// The parameter: whether the PS serves a data plane.
class PsServiceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    service_ = std::make_unique<ParameterServerService>(&store_, registry_);
    auto server = StartServer(ServerOptions(), {service_.get()}, registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    if (GetParam()) {
      auto data_plane =
          DataPlaneServer::Start(DataPlaneServer::Options(), &store_, service_->handler());
      ASSERT_TRUE(data_plane.ok()) << data_plane.status();
      data_plane_ = std::move(*data_plane);
      service_->set_data_plane(data_plane_.get());
    }
    target_ = absl::StrCat("127.0.0.1:", server_->port());
    RemotePsClient::Options options;
    options.target = target_;
    options.call_timeout = std::chrono::seconds(10);
    client_ = std::make_unique<RemotePsClient>(options);

    CreateVariablesRequest req;
    req.set_job(kJob);
    req.set_checkpoint_dir(".");  // the root
    VariableSpecProto* spec = req.add_variables();
    spec->set_name("w");
    spec->set_dtype(DT_FLOAT32);
    spec->add_shape(2);
    spec->add_shape(2);
    spec->mutable_initializer()->set_type("ones");
    spec->mutable_optimizer()->set_type("sgd");
    spec->mutable_optimizer()->set_learning_rate(0.5f);
    CreateVariablesResponse resp;
    ASSERT_TRUE(client_->CreateVariables(req, &resp).ok());
    ASSERT_TRUE(client_->CreateVariables(req, &resp).ok());
    EXPECT_EQ(resp.existing(), 1);
  }

  absl::Status PushW(Shape shape, float value) {
    PushRequest req;
    req.set_job(kJob);
    NamedTensor* g = req.add_gradients();
    g->set_name("w");
    EncodeTensor(shape, std::vector<float>(NumElements(shape), value), g->mutable_tensor());
    PushResponse resp;
    return client_->Push(req, &resp);
  }

  absl::StatusOr<std::vector<float>> PullW() {
    PullRequest req;
    req.set_job(kJob);
    req.add_names("w");
    PullResponse resp;
    if (absl::Status s = client_->Pull(req, &resp); !s.ok()) return s;
    auto t = DecodeTensor(resp.tensors(0).tensor());
    if (!t.ok()) return t.status();
    return t->ToVector();
  }

  double RequestCount(const std::string& method, const std::string& code) {
    for (const auto& family : registry_->Collect()) {
      if (family.name != "pscluster_rpc_requests_total") continue;
      for (const auto& metric : family.metric) {
        bool match = true;
        for (const auto& label : metric.label) {
          if (label.name == "method" && label.value != method) match = false;
          if (label.name == "code" && label.value != code) match = false;
        }
        if (match) return metric.counter.value;
      }
    }
    return 0;
  }

  // A fresh directory for the PS's --checkpoint_root.
  static std::string MakeRoot() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ps-service-XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) return "";
    return std::filesystem::canonical(dir).string();
  }
  static VariableStore::Options WithCheckpointRoot(const std::string& root) {
    VariableStore::Options options;
    options.checkpoint_root = root;
    return options;
  }

  const std::string root_ = MakeRoot();
  JobStores store_{WithCheckpointRoot(root_)};
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<DataPlaneServer> data_plane_;
  std::string target_;
  std::unique_ptr<RemotePsClient> client_;
};

INSTANTIATE_TEST_SUITE_P(Transports, PsServiceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "DataPlane" : "Grpc";
                         });

TEST_P(PsServiceTest, PushPullRoundtrip) {
  ASSERT_TRUE(PushW({2, 2}, 1.0f).ok());
  auto w = PullW();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, ElementsAre(0.5f, 0.5f, 0.5f, 0.5f));

  StatsResponse stats;
  ASSERT_TRUE(client_->Stats(JobStats(), &stats).ok());
  EXPECT_EQ(stats.applied_updates(), 1);
  ASSERT_EQ(stats.variables_size(), 1);
  EXPECT_EQ(stats.variables(0).parameter_bytes(), 16);
  EXPECT_EQ(RequestCount("Push", "OK"), 1);
  EXPECT_EQ(RequestCount("Pull", "OK"), 1);
  // With a data plane both calls went over it.
  if (GetParam()) {
    EXPECT_EQ(data_plane_->calls(), 2);
  }
}

TEST_P(PsServiceTest, FusedPushPullOfLargeTensorsRoundTrips) {
  // Large enough that the tensors travel as aliased slices both ways.
  const Shape shape{1 << 20};
  CreateVariablesRequest create;
  create.set_job(kJob);
  create.set_checkpoint_dir(".");  // the root
  VariableSpecProto* spec = create.add_variables();
  spec->set_name("big");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(shape[0]);
  spec->mutable_initializer()->set_type("zeros");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(1.0f);
  CreateVariablesResponse created;
  ASSERT_TRUE(client_->CreateVariables(create, &created).ok());
  std::vector<float> grad(shape[0]);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i % 1000);
  PushRequest req;
  req.set_job(kJob);
  NamedTensor* g = req.add_gradients();
  g->set_name("big");
  EncodeTensor(shape, grad, g->mutable_tensor());
  req.mutable_pull()->add_names("big");
  // The same response object twice, as a worker reuses its buffers.
  PushResponse resp;
  for (int round = 1; round <= 2; ++round) {
    ASSERT_TRUE(client_->Push(req, &resp).ok());
    ASSERT_EQ(resp.pulled().tensors_size(), 1);
    auto big = DecodeTensor(resp.pulled().tensors(0).tensor());
    ASSERT_TRUE(big.ok()) << big.status();
    ASSERT_EQ(big->values().size(), grad.size());
    for (size_t i = 0; i < grad.size(); i += 4099) {
      ASSERT_EQ(big->values()[i], -round * grad[i]) << i;
    }
  }
}

TEST_P(PsServiceTest, StartedPushesRunTogetherAndReportTheirOwnStatus) {
  PushRequest good;
  good.set_job(kJob);
  NamedTensor* g = good.add_gradients();
  g->set_name("w");
  EncodeTensor(Shape{2, 2}, std::vector<float>(4, 1.0f), g->mutable_tensor());
  good.mutable_pull()->add_names("w");
  PushRequest bad = good;
  bad.mutable_gradients(0)->set_name("missing");
  PushResponse good_response, bad_response;
  std::unique_ptr<PendingPsCall> first = client_->StartPush(good, &good_response);
  std::unique_ptr<PendingPsCall> second = client_->StartPush(bad, &bad_response);
  absl::Status s2 = second->Wait();  // waited for out of order
  absl::Status s1 = first->Wait();
  ASSERT_TRUE(s1.ok()) << s1;
  ASSERT_EQ(good_response.pulled().tensors_size(), 1);
  EXPECT_EQ(s2.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s2.message()),
              AllOf(StartsWith("ps " + target_ + ": "), HasSubstr("'missing'")));
  // A call never waited for is finished by its destructor.
  { std::unique_ptr<PendingPsCall> dropped = client_->StartPush(good, &good_response); }
  StatsResponse stats;
  ASSERT_TRUE(client_->Stats(JobStats(), &stats).ok());
  EXPECT_EQ(stats.applied_updates(), 2);
}

TEST_P(PsServiceTest, MalformedRequestBytesAreInvalidArgument) {
  // Not a PushRequest: the server answers INVALID_ARGUMENT and keeps serving.
  auto channel = MakeChannel(target_);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  SetDeadline(&context, std::chrono::seconds(10));
  const std::string junk = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01";
  grpc::Slice slice(junk);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&context, "/pscluster.ParameterServer/Push", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, &status);
  void* tag;
  bool ok;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("malformed PushRequest"));
  EXPECT_TRUE(PushW({2, 2}, 1.0f).ok());
}

TEST_P(PsServiceTest, ErrorsKeepTheirCodeAndTheServerKeepsServing) {
  absl::Status s = PushW({4}, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(StartsWith("ps " + target_ + ": "), HasSubstr("'w'"),
                                              HasSubstr("[4]"), HasSubstr("[2, 2]")));

  PullRequest req;
  req.set_job(kJob);
  req.add_names("missing");
  PullResponse resp;
  s = client_->Pull(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'missing'"));

  EXPECT_EQ(RequestCount("Push", "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(RequestCount("Pull", "NOT_FOUND"), 1);

  // Nothing was applied, and the server still answers.
  auto w = PullW();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, ElementsAre(1.0f, 1.0f, 1.0f, 1.0f));
  EXPECT_TRUE(PushW({2, 2}, 1.0f).ok());
}

TEST_P(PsServiceTest, RowLookupAndSparsePushRoundTrip) {
  CreateVariablesRequest create;
  create.set_job(kJob);
  create.set_checkpoint_dir(".");  // the root
  VariableSpecProto* table = create.add_variables();
  table->set_name("t/part_0");
  table->set_dtype(DT_FLOAT32);
  table->set_kind(HASH_TABLE);
  table->add_shape(2);
  table->set_max_rows(100);
  table->set_eviction(AGE);
  table->mutable_initializer()->set_type("constant");
  table->mutable_initializer()->set_value(0.5f);
  table->mutable_optimizer()->set_type("sgd");
  table->mutable_optimizer()->set_learning_rate(0.5f);
  CreateVariablesResponse created;
  ASSERT_TRUE(client_->CreateVariables(create, &created).ok());

  // One push: a hash-table row and row 1 of the dense [2, 2] "w" (all ones).
  PushRequest push;
  push.set_job(kJob);
  SparseGradient* g = push.add_sparse();
  g->set_name("t/part_0");
  g->set_ids(EncodeRowIds(std::vector<uint64_t>{uint64_t{1} << 63}));
  EncodeTensor({1, 2}, {1.0f, -1.0f}, g->mutable_rows());
  g = push.add_sparse();
  g->set_name("w");
  g->set_ids(EncodeRowIds(std::vector<int64_t>{1}));
  EncodeTensor({1, 2}, {1.0f, 2.0f}, g->mutable_rows());
  PushResponse pushed;
  ASSERT_TRUE(client_->Push(push, &pushed).ok());

  PullRequest pull;
  pull.set_job(kJob);
  RowIds* lookup = pull.add_lookups();
  lookup->set_name("t/part_0");
  lookup->set_ids(EncodeRowIds(std::vector<uint64_t>{7, uint64_t{1} << 63, 7}));
  lookup = pull.add_lookups();
  lookup->set_name("w");
  lookup->set_ids(EncodeRowIds(std::vector<int64_t>{1, 0}));
  PullResponse resp;
  ASSERT_TRUE(client_->Pull(pull, &resp).ok());
  ASSERT_EQ(resp.rows_size(), 2);
  auto table_rows = DecodeTensor(resp.rows(0).tensor());
  ASSERT_TRUE(table_rows.ok());
  EXPECT_THAT(table_rows->shape(), ElementsAre(3, 2));
  EXPECT_THAT(table_rows->values(), ElementsAre(0.5f, 0.5f, 0.0f, 1.0f, 0.5f, 0.5f));
  auto w_rows = DecodeTensor(resp.rows(1).tensor());
  ASSERT_TRUE(w_rows.ok());
  EXPECT_THAT(w_rows->values(), ElementsAre(0.5f, 0.0f, 1.0f, 1.0f));

  StatsResponse stats;
  ASSERT_TRUE(client_->Stats(JobStats(), &stats).ok());
  ASSERT_EQ(stats.variables_size(), 2);
  EXPECT_EQ(stats.variables(0).name(), "t/part_0");
  EXPECT_EQ(stats.variables(0).kind(), HASH_TABLE);
  EXPECT_EQ(stats.variables(0).rows(), 2);

  // A repeated id is INVALID_ARGUMENT over the wire too, and nothing moves.
  g = push.mutable_sparse(1);
  g->set_ids(EncodeRowIds(std::vector<int64_t>{0, 0}));
  EncodeTensor({2, 2}, {1.0f, 1.0f, 1.0f, 1.0f}, g->mutable_rows());
  absl::Status s = client_->Push(push, &pushed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("'w'"), HasSubstr("id 0")));
  auto w = PullW();
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(*w, ElementsAre(1.0f, 1.0f, 0.5f, 0.0f));
}

TEST_P(PsServiceTest, KeyedPushSaveAndRestoreRoundTrip) {
  PushRequest push;
  push.set_job(kJob);
  NamedTensor* g = push.add_gradients();
  g->set_name("w");
  EncodeTensor({2, 2}, {1.0f, 1.0f, 1.0f, 1.0f}, g->mutable_tensor());
  push.mutable_update()->set_closure_id(4);
  push.mutable_update()->set_step(0);
  PushResponse pushed;
  ASSERT_TRUE(client_->Push(push, &pushed).ok());
  EXPECT_FALSE(pushed.duplicate());
  ASSERT_TRUE(client_->Push(push, &pushed).ok());
  EXPECT_TRUE(pushed.duplicate());

  SaveRequest save;
  save.set_job(kJob);
  save.set_name("grpc-ps-0.data");  // relative to the PS's checkpoint root
  SaveResponse saved;
  ASSERT_TRUE(client_->Save(save, &saved).ok());
  EXPECT_EQ(saved.name(), save.name());
  EXPECT_TRUE(std::filesystem::exists(root_ + "/grpc-ps-0.data"));
  EXPECT_GT(saved.bytes(), 0);
  EXPECT_EQ(saved.checksum().size(), 16u);
  EXPECT_EQ(saved.variables(), 1);

  ASSERT_TRUE(PushW({2, 2}, 1.0f).ok());  // past the checkpoint
  RestoreRequest restore;
  restore.set_job(kJob);
  restore.mutable_variables()->set_job(kJob);
  CheckpointFile* file = restore.add_files();
  file->set_name(saved.name());
  file->set_bytes(saved.bytes());
  file->set_checksum(saved.checksum());
  VariableSpecProto* spec = restore.mutable_variables()->add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(2);
  spec->add_shape(2);
  spec->mutable_initializer()->set_type("ones");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.5f);
  restore.set_num_ps(1);
  RestoreResponse restored;
  ASSERT_TRUE(client_->Restore(restore, &restored).ok());
  EXPECT_EQ(restored.variables(), 1);
  EXPECT_EQ(restored.rows(), 2);
  auto w = PullW();
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(*w, ElementsAre(0.5f, 0.5f, 0.5f, 0.5f));
  ASSERT_TRUE(client_->Push(push, &pushed).ok());
  EXPECT_TRUE(pushed.duplicate());  // the applied key came back too

  // A checksum mismatch is DATA_LOSS over the wire, naming the file.
  file->set_checksum("0000000000000000");
  absl::Status s = client_->Restore(restore, &restored);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr(saved.name()));
  EXPECT_EQ(RequestCount("Save", "OK"), 1);
  EXPECT_EQ(RequestCount("Restore", "DATA_LOSS"), 1);
}

// Save and Restore take names under --checkpoint_root, never free paths:
// whatever a client sends, nothing outside the root is written or read.
TEST_P(PsServiceTest, CheckpointNamesOutsideTheRootAreRefused) {
  namespace fs = std::filesystem;
  const std::string outside = root_ + "-outside";
  fs::create_directories(outside);
  const std::string victim = outside + "/victim";
  std::ofstream(victim) << "untouched";
  fs::create_directory_symlink(outside, root_ + "/escape");
  fs::create_symlink(victim, root_ + "/leak.data");
  const std::string names[] = {"/etc/passwd",
                               victim,
                               "../x",
                               "a/../../x",
                               "escape/victim",
                               "leak.data",
                               "",
                               "a//b",
                               "ok/../../" + fs::path(outside).filename().string() + "/victim",
                               "job/ckpt-0/MANIFEST",
                               "job/joblog"};  // no data file
  for (const std::string& name : names) {
    SaveRequest save;
    save.set_job(kJob);
    save.set_name(name);
    SaveResponse saved;
    absl::Status s = client_->Save(save, &saved);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "'" << name << "': " << s;
    if (!name.empty()) {
      EXPECT_THAT(std::string(s.message()), HasSubstr(name));
    }

    RestoreRequest restore;
    restore.set_job(kJob);
    restore.mutable_variables()->set_job(kJob);
    CheckpointFile* file = restore.add_files();
    file->set_name(name);
    file->set_bytes(9);
    file->set_checksum("0000000000000000");
    restore.set_num_ps(1);
    RestoreResponse restored;
    s = client_->Restore(restore, &restored);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "'" << name << "': " << s;
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("untouched")));
  }
  std::stringstream content;
  content << std::ifstream(victim).rdbuf();
  EXPECT_EQ(content.str(), "untouched");
  EXPECT_EQ(std::distance(fs::directory_iterator(outside), fs::directory_iterator()), 1)
      << "a temporary file was left outside the root";
  // The variable is still there: a refused Save or Restore changes nothing.
  auto w = PullW();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, ElementsAre(1.0f, 1.0f, 1.0f, 1.0f));
}

// The data plane's own cases: what a stranger's bytes, a restarted PS and a
// port nobody can reach do.
using DataPlaneTest = PsServiceTest;
INSTANTIATE_TEST_SUITE_P(Only, DataPlaneTest, ::testing::Values(true));

// The answer a raw connection gets: its code and message.
std::pair<int32_t, std::string> Answer(int fd) {
  FrameHead head;
  bool closed = false;
  absl::Status s = ReadFrameHead(fd, 1 << 20, absl::Now() + absl::Seconds(10), absl::Seconds(10),
                                 &head, &closed);
  if (!s.ok()) return {-1, std::string(s.message())};
  return {head.code, head.meta};
}

TEST_P(DataPlaneTest, StrangersBytesAreAnsweredWithTheProblemAndTheServerKeepsServing) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  {
    absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", data_plane_->port(), deadline);
    ASSERT_TRUE(fd.ok()) << fd.status();
    const std::string http = "GET /metrics HTTP/1.1\r\nHost: ps\r\n\r\n";
    ASSERT_EQ(send(fd->get(), http.data(), http.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(http.size()));
    auto [code, message] = Answer(fd->get());
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(message, HasSubstr("bad magic"));
  }
  {
    // A frame announcing 1 GiB: refused before anything is allocated for it.
    absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", data_plane_->port(), deadline);
    ASSERT_TRUE(fd.ok()) << fd.status();
    const std::string frame =
        EncodeFrameHead(kDataPlanePush, 0, 0, {uint64_t{1} << 30}, uint64_t{1} << 30);
    ASSERT_EQ(send(fd->get(), frame.data(), frame.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frame.size()));
    auto [code, message] = Answer(fd->get());
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kResourceExhausted));
    EXPECT_THAT(message, HasSubstr("larger than the limit"));
  }
  {
    // A PushRequest whose meta has a tensor the frame does not carry.
    absl::StatusOr<UniqueFd> fd = DialTcp("127.0.0.1", data_plane_->port(), deadline);
    ASSERT_TRUE(fd.ok()) << fd.status();
    PushRequest meta;
    meta.set_job(kJob);
    NamedTensor* g = meta.add_gradients();
    g->set_name("w");
    g->mutable_tensor()->set_dtype(DT_FLOAT32);
    ASSERT_TRUE(
        WriteFrame(fd->get(), kDataPlanePush, 0, meta.SerializeAsString(), {}, deadline).ok());
    auto [code, message] = Answer(fd->get());
    EXPECT_EQ(code, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(message, HasSubstr("announces 1 tensors but its frame carries 0"));
    // And a meta that is not a protobuf at all.
    absl::StatusOr<UniqueFd> fd2 = DialTcp("127.0.0.1", data_plane_->port(), deadline);
    ASSERT_TRUE(fd2.ok()) << fd2.status();
    ASSERT_TRUE(WriteFrame(fd2->get(), kDataPlanePush, 0, "\xff\xff\xff\xff", {}, deadline).ok());
    auto [code2, message2] = Answer(fd2->get());
    EXPECT_EQ(code2, static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(message2, HasSubstr("malformed pscluster.PushRequest"));
  }
  // Nothing was applied; the cluster's own client still gets answers.
  auto w = PullW();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, ElementsAre(1.0f, 1.0f, 1.0f, 1.0f));
  EXPECT_TRUE(PushW({2, 2}, 1.0f).ok());
  EXPECT_EQ(data_plane_->calls(), 2);
}

TEST_P(DataPlaneTest, ARestartedDataPlaneIsFoundAgain) {
  ASSERT_TRUE(PushW({2, 2}, 1.0f).ok());
  // The data plane goes away (its connections close) and comes back on
  // another port, as after a PS restart.
  data_plane_->Shutdown();
  auto restarted = DataPlaneServer::Start(DataPlaneServer::Options(), &store_, service_->handler());
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  service_->set_data_plane(restarted->get());
  ASSERT_TRUE(PushW({2, 2}, 1.0f).ok());
  EXPECT_EQ((*restarted)->calls(), 1);
  auto w = PullW();
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(*w, ElementsAre(0.0f, 0.0f, 0.0f, 0.0f));
  service_->set_data_plane(nullptr);
}

TEST_P(DataPlaneTest, IdleConnectionsAreClosedAndTheClientDialsAgain) {
  DataPlaneServer::Options options;
  options.idle_timeout = absl::Milliseconds(200);
  auto quick = DataPlaneServer::Start(options, &store_, service_->handler());
  ASSERT_TRUE(quick.ok()) << quick.status();
  service_->set_data_plane(quick->get());
  ASSERT_TRUE(PushW({2, 2}, 1.0f).ok());
  // A stranger's connection that never sends is closed after the timeout.
  absl::StatusOr<UniqueFd> idle =
      DialTcp("127.0.0.1", (*quick)->port(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(idle.ok()) << idle.status();
  FrameHead head;
  bool closed = false;
  absl::Status s = ReadFrameHead(idle->get(), 1 << 20, absl::Now() + absl::Seconds(10),
                                 absl::Seconds(10), &head, &closed);
  EXPECT_TRUE(closed) << s;
  // The client's pooled connection is closed the same way (waited for:
  // the two timeouts fire on threads of their own); the next call notices
  // before sending and dials again.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while ((*quick)->connections() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ((*quick)->connections(), 0);
  const absl::Status again = PushW({2, 2}, 1.0f);
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_EQ((*quick)->calls(), 2);
  service_->set_data_plane(nullptr);
}

TEST_P(DataPlaneTest, TheClientDropsConnectionsIdleLongerThanItsMaxIdle) {
  DataPlaneClient::Options options;
  options.target = target_;
  options.max_idle = absl::Milliseconds(50);
  auto stub = ParameterServer::NewStub(MakeChannel(target_));
  DataPlaneClient client(options, stub.get());
  PullRequest pull;
  pull.set_job(kJob);
  pull.add_names("w");
  PullResponse pulled;
  for (int call = 0; call < 2; ++call) {
    absl::StatusOr<std::unique_ptr<FrameStream>> connection = client.Acquire();
    ASSERT_TRUE(connection.ok() && *connection != nullptr) << connection.status();
    ASSERT_TRUE(client.Pull(std::move(*connection), pull, &pulled).ok());
    EXPECT_EQ(data_plane_->connections(), 1);  // reused at once
  }
  absl::SleepFor(absl::Milliseconds(100));
  absl::StatusOr<std::unique_ptr<FrameStream>> connection = client.Acquire();
  ASSERT_TRUE(connection.ok() && *connection != nullptr) << connection.status();
  ASSERT_TRUE(client.Pull(std::move(*connection), pull, &pulled).ok());
  // The stale one was closed and a new one dialled.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (data_plane_->connections() > 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(data_plane_->connections(), 1);
  EXPECT_EQ(data_plane_->calls(), 3);
}

TEST_P(DataPlaneTest, AnUnreachableOrAbsentDataPlaneFallsBackToGrpc) {
  // A port nobody listens on (a firewall would look the same): the client
  // warns and uses gRPC.
  auto gone = DataPlaneServer::Start(DataPlaneServer::Options(), &store_, service_->handler());
  ASSERT_TRUE(gone.ok()) << gone.status();
  (*gone)->Shutdown();
  service_->set_data_plane(gone->get());
  ASSERT_TRUE(PushW({2, 2}, 1.0f).ok());
  // No data plane at all; and a client told not to use one.
  service_->set_data_plane(nullptr);
  RemotePsClient::Options options;
  options.target = target_;
  RemotePsClient fresh(options);
  PushResponse resp;
  PushRequest req;
  req.set_job(kJob);
  NamedTensor* g = req.add_gradients();
  g->set_name("w");
  EncodeTensor(Shape{2, 2}, std::vector<float>(4, 1.0f), g->mutable_tensor());
  ASSERT_TRUE(fresh.Push(req, &resp).ok());
  service_->set_data_plane(data_plane_.get());
  options.data_plane = false;
  RemotePsClient grpc_only(options);
  ASSERT_TRUE(grpc_only.Push(req, &resp).ok());
  EXPECT_EQ(data_plane_->calls(), 0);
  EXPECT_EQ(RequestCount("Push", "OK"), 3);
}

}  // namespace
}  // namespace pscluster
