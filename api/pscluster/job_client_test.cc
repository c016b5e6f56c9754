// JobClient against a real local cluster (1 PS, 1 worker, a coordinator with
// a token): a small Fashion-MNIST job trains to SUCCEEDED; bad YAML, an
// unknown job and a wrong token give their codes. The Python tests
// (python/tests/) cover the rest of the surface through the same code.
#include "api/pscluster/job_client.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "api/pscluster/local_process_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

constexpr char kData[] = "/usr/share/datasets/fashion-mnist";

std::string SmallJob() {
  return std::string("name: api-test\nseed: 7\nmodel:\n  inputs: {dense: 784}\n"
                     "  layers: [{dense: {units: 64, activation: relu}}, {dense: {units: 10}}]\n"
                     "optimizer: {type: adam, learning_rate: 0.002}\n"
                     "data:\n  train:\n") +
         "    images: " + kData + "/train-images-idx3-ubyte.gz\n" +
         "    labels: " + kData + "/train-labels-idx1-ubyte.gz\n" + "    limit: 10000\n" +
         "  eval:\n" + "    images: " + kData + "/t10k-images-idx3-ubyte.gz\n" +
         "    labels: " + kData + "/t10k-labels-idx1-ubyte.gz\n" + "    limit: 1000\n" +
         "  per_replica_batch: 64\n" +
         "train: {epochs: 1, steps_per_closure: 10, closures_per_worker: 1}\n";
}

class JobClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LocalProcessClusterOptions options;
    options.num_ps = 1;
    options.num_workers = 1;
    // The servers are this test's data, in its runfiles.
    if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
      options.bin_dir = std::string(srcdir) + "/pscluster/api";
    }
    absl::StatusOr<std::unique_ptr<LocalProcessCluster>> started =
        LocalProcessCluster::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = started->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    absl::StatusOr<std::unique_ptr<JobClient>> client =
        JobClient::Connect(cluster_->address(), cluster_->client_options());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  static LocalProcessCluster* cluster_;
  std::unique_ptr<JobClient> client_;
};

LocalProcessCluster* JobClientTest::cluster_ = nullptr;

TEST_F(JobClientTest, SubmitWatchEventsList) {
  absl::StatusOr<std::string> id = client_->Submit(SmallJob(), "small.yaml");
  ASSERT_TRUE(id.ok()) << id.status();
  int updates = 0;
  WatchOptions watch;
  watch.timeout = absl::Seconds(120);
  watch.on_update = [&updates](const JobStatusProto&) { ++updates; };
  absl::StatusOr<JobStatusProto> done = client_->Watch(*id, watch);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), SUCCEEDED) << done->error();
  // 10,000 examples, one epoch: far above chance (0.1); ~0.78 measured.
  EXPECT_GT(done->eval_accuracy(), 0.7);
  RecordProperty("eval_accuracy", std::to_string(done->eval_accuracy()));
  EXPECT_GT(updates, 0);

  absl::StatusOr<GetJobEventsResponse> events = client_->Events(*id);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_GT(events->events_size(), 0);

  absl::StatusOr<ListJobsResponse> jobs = client_->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  bool listed = false;
  for (const JobStatusProto& j : jobs->jobs()) listed |= j.job_id() == *id;
  EXPECT_TRUE(listed);

  // An ended job cannot be cancelled.
  EXPECT_EQ(client_->Cancel(*id).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobClientTest, BadYamlFailsLocallyWithPosition) {
  absl::StatusOr<ListJobsResponse> before = client_->List();
  ASSERT_TRUE(before.ok()) << before.status();
  absl::StatusOr<std::string> id = client_->Submit("name: x\nmodel: [1, 2\n", "bad.yaml");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(id.status().message(), "bad.yaml:")) << id.status();
  absl::StatusOr<ListJobsResponse> after = client_->List();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->jobs_size(), before->jobs_size());
  EXPECT_EQ(client_->SubmitFile("/nonexistent/job.yaml").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(JobClientTest, UnknownJobIsNotFound) {
  EXPECT_EQ(client_->Get("no-such-job").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Events("no-such-job").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Cancel("no-such-job").code(), absl::StatusCode::kNotFound);
  WatchOptions watch;
  watch.timeout = absl::Seconds(30);
  EXPECT_EQ(client_->Watch("no-such-job", watch).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobClientTest, WrongTokenIsUnauthenticated) {
  JobClientOptions options = cluster_->client_options();
  options.token = "not-the-token-0123456789";
  absl::StatusOr<std::unique_ptr<JobClient>> client =
      JobClient::Connect(cluster_->address(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<ListJobsResponse> jobs = (*client)->List();
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kUnauthenticated) << jobs.status();
}

TEST(JobClientConnectTest, Errors) {
  EXPECT_EQ(JobClient::Connect("").status().code(), absl::StatusCode::kInvalidArgument);
  JobClientOptions options;
  options.connect_timeout = absl::Milliseconds(300);
  // Port 1 on loopback: nothing listens there.
  EXPECT_EQ(JobClient::Connect("127.0.0.1:1", options).status().code(),
            absl::StatusCode::kUnavailable);
  options.tls_cert = "/nonexistent/cert.pem";
  EXPECT_EQ(JobClient::Connect("127.0.0.1:1", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pscluster
