#include "common/cluster_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace pscluster {
namespace {

using ::testing::HasSubstr;

constexpr char kCluster[] =
    R"("cluster": {"chief": ["coord:2222"], "worker": ["10.0.0.1:2222", "w1.svc:2222"],)"
    R"( "ps": ["10.0.0.3:2222", "[::1]:2223"]})";

std::string TfConfig(const std::string &task) {
  return "{" + std::string(kCluster) + ", " + task + "}";
}

TEST(ParseTfConfigTest, ParsesClusterAndTask) {
  auto config = ParseTfConfig(TfConfig(R"("task": {"type": "ps", "index": 1})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.chief, std::vector<std::string>{"coord:2222"});
  EXPECT_EQ(config->cluster.worker, (std::vector<std::string>{"10.0.0.1:2222", "w1.svc:2222"}));
  EXPECT_EQ(config->cluster.ps, (std::vector<std::string>{"10.0.0.3:2222", "[::1]:2223"}));
  EXPECT_EQ(config->task_type, TaskType::kPs);
  EXPECT_EQ(config->task_index, 1);
  EXPECT_EQ(config->task_address(), "[::1]:2223");
}

TEST(ParseTfConfigTest, IndexDefaultsToZeroAndExtraKeysAreIgnored) {
  auto config = ParseTfConfig(
      TfConfig(R"("task": {"type": "chief"}, "rpc_layer": "grpc", "environment": "x")"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_type, TaskType::kChief);
  EXPECT_EQ(config->task_address(), "coord:2222");
}

TEST(ParseTfConfigTest, ChiefIsOptionalForWorkersAndPs) {
  auto config = ParseTfConfig(
      R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "worker", "index": 0}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->cluster.chief.empty());
}

// TF's evaluator TF_CONFIG: the cluster without the evaluator, and the task
// {"type": "evaluator", "index": 0}.
TEST(ParseTfConfigTest, EvaluatorNeedNotBeInTheCluster) {
  auto config = ParseTfConfig(TfConfig(R"("task": {"type": "evaluator", "index": 0})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_type, TaskType::kEvaluator);
  EXPECT_EQ(config->task_index, 0);
  EXPECT_EQ(config->task_address(), "");
  EXPECT_EQ(config->cluster.ps.size(), 2u);
  // Index defaults to 0.
  config = ParseTfConfig(TfConfig(R"("task": {"type": "evaluator"})"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_index, 0);
}

TEST(ParseTfConfigTest, EvaluatorListedInTheCluster) {
  auto config = ParseTfConfig(
      R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"], "evaluator": ["e:3"]},)"
      R"( "task": {"type": "evaluator", "index": 0}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.evaluator, std::vector<std::string>{"e:3"});
  EXPECT_EQ(config->task_address(), "e:3");
  // A cluster file with an evaluator still serves the other tasks.
  auto spec = ParseClusterFile(
      "cluster:\n  worker: [a:1]\n  ps: [b:2]\n  evaluator: [e:3]\n", "cluster.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto ps = MakeClusterConfig(*spec, TaskType::kPs, 0, "cluster.yaml");
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->task_address(), "b:2");
}

struct BadCase {
  const char *name;
  std::string text;
  const char *message;  // a substring of the error
};

class BadTfConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadTfConfigTest, NamesTheProblem) {
  auto config = ParseTfConfig(GetParam().text);
  ASSERT_FALSE(config.ok()) << GetParam().name;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("TF_CONFIG"));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(GetParam().message))
      << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadTfConfigTest,
    ::testing::Values(
        BadCase{"truncated", R"({"cluster": {"ps": ["a:1"])", "TF_CONFIG:1:"},
        BadCase{"truncated_says_malformed", R"({"cluster": {"ps": ["a:1"])", "malformed JSON"},
        BadCase{"empty", "", "empty"}, BadCase{"not_an_object", "[1, 2]", "must be a JSON object"},
        BadCase{"no_cluster", R"({"task": {"type": "ps", "index": 0}})", "missing `cluster`"},
        BadCase{"cluster_not_map", R"({"cluster": [1], "task": {"type": "ps"}})",
                "`cluster` must be a mapping"},
        BadCase{"no_task", "{" + std::string(kCluster) + "}", "missing `task`"},
        BadCase{"no_task_type", TfConfig(R"("task": {"index": 0})"), "missing `task.type`"},
        BadCase{"unknown_task_type", TfConfig(R"("task": {"type": "estimator", "index": 0})"),
                "unknown task type 'estimator' (chief, worker, ps or evaluator)"},
        BadCase{"evaluator_index", TfConfig(R"("task": {"type": "evaluator", "index": 1})"),
                "task evaluator 1 is out of range: there is one evaluator, index 0"},
        BadCase{"two_evaluators",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"], "evaluator": ["c:3", "d:4"]},)"
                R"( "task": {"type": "evaluator"}})",
                "at most one evaluator"},
        BadCase{"bad_index", TfConfig(R"("task": {"type": "ps", "index": "one"})"),
                "`task.index` must be an integer"},
        BadCase{"index_out_of_range", TfConfig(R"("task": {"type": "ps", "index": 2})"),
                "task ps 2 is out of range: the cluster has 2 ps tasks"},
        BadCase{"negative_index", TfConfig(R"("task": {"type": "worker", "index": -1})"),
                "task worker -1 is out of range"},
        BadCase{"chief_task_without_chief",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "chief"}})",
                "task chief 0 is out of range: the cluster has 0 chief tasks"},
        BadCase{"unknown_job",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"], "estimator": ["c:3"]},)"
                R"( "task": {"type": "ps"}})",
                "TF_CONFIG:1:48: unknown job 'estimator' in `cluster` (chief, worker, ps or "
                "evaluator)"},
        BadCase{"not_a_list",
                R"({"cluster": {"worker": "a:1", "ps": ["b:2"]}, "task": {"type": "ps"}})",
                "`cluster.worker` must be a list of host:port"},
        BadCase{"no_port",
                R"({"cluster": {"worker": ["a"], "ps": ["b:2"]}, "task": {"type": "ps"}})",
                "worker 0: 'a' is not host:port"},
        BadCase{"empty_host",
                R"({"cluster": {"worker": [":1"], "ps": ["b:2"]}, "task": {"type": "ps"}})",
                "is not host:port"},
        BadCase{"port_too_big",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:65536"]}, "task": {"type": "ps"}})",
                "ps 0: 'b:65536': port '65536' is out of range (1-65535)"},
        BadCase{"port_zero",
                R"({"cluster": {"worker": ["a:0"], "ps": ["b:1"]}, "task": {"type": "ps"}})",
                "port '0' is out of range"},
        BadCase{"port_not_number",
                R"({"cluster": {"worker": ["a:http"], "ps": ["b:1"]}, "task": {"type": "ps"}})",
                "port 'http' is out of range"},
        BadCase{"bad_host",
                R"({"cluster": {"worker": ["a b:1"], "ps": ["b:1"]}, "task": {"type": "ps"}})",
                "host 'a b' is not a DNS name or IP address"},
        BadCase{"duplicate",
                R"({"cluster": {"worker": ["a:1"], "ps": ["b:2", "a:1"]}, "task": {"type": "ps"}})",
                "ps 1: duplicate address 'a:1' (also worker 0)"},
        BadCase{"two_chiefs",
                R"({"cluster": {"chief": ["c:1", "d:1"], "worker": ["a:1"], "ps": ["b:2"]},)"
                R"( "task": {"type": "ps"}})",
                "exactly one chief"},
        BadCase{"no_worker", R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps"}})",
                "`cluster` has no worker task"}),
    [](const ::testing::TestParamInfo<BadCase> &info) { return std::string(info.param.name); });

// TF's TF_CONFIG for MultiWorkerMirroredStrategy: workers only.
TEST(ParseTfConfigTest, WorkersOnlyIsACluster) {
  auto config = ParseTfConfig(R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->cluster.ps.empty());
  EXPECT_EQ(config->cluster.worker.size(), 2u);
}

TEST(ParseClusterFileTest, ParsesYaml) {
  auto spec = ParseClusterFile(
      "# a comment\ncluster:\n  chief: [coordinator:2222]\n  "
      "worker:\n    - worker-0.w:2222\n"
      "  ps:\n    - ps-0.ps:2222\n    - ps-1.ps:2222\n",
      "cluster.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->chief, std::vector<std::string>{"coordinator:2222"});
  EXPECT_EQ(spec->worker, std::vector<std::string>{"worker-0.w:2222"});
  EXPECT_EQ(spec->ps, (std::vector<std::string>{"ps-0.ps:2222", "ps-1.ps:2222"}));
}

TEST(ParseClusterFileTest, ErrorsNameFileLineAndColumn) {
  auto spec = ParseClusterFile("cluster:\n  worker: [a:1]\n  ps: [b:99999]\n", "c.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("c.yaml:3:8: ps 0: 'b:99999'"));
  spec = ParseClusterFile("cluster:\n  worker: [a:1\n", "c.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("c.yaml:"));
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("malformed YAML"));
  spec = ParseClusterFile("workers: [a:1]\n", "c.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("c.yaml:1:1: missing `cluster`"));
}

TEST(ParseClusterFileTest, TlsFilesAreRead) {
  auto spec = ParseClusterFile(
      "cluster:\n  worker: [a:1]\n  ps: [b:2]\n"
      "tls:\n  cert: /certs/c.pem\n  key: /certs/c.key\n  ca: /certs/ca.pem\n"
      "  server_name: pscluster\n",
      "c.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->tls.cert, "/certs/c.pem");
  EXPECT_EQ(spec->tls.key, "/certs/c.key");
  EXPECT_EQ(spec->tls.ca, "/certs/ca.pem");
  EXPECT_EQ(spec->tls.server_name, "pscluster");
  auto config = ParseTfConfig(
      R"({"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": "ps"},)"
      R"( "tls": {"cert": "c.pem", "key": "c.key", "ca": "ca.pem"}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster.tls.ca, "ca.pem");
  EXPECT_TRUE(config->cluster.tls.server_name.empty());
}

TEST(ParseClusterFileTest, TlsNeedsCertKeyAndCa) {
  const std::string cluster = "cluster:\n  worker: [a:1]\n  ps: [b:2]\n";
  auto spec = ParseClusterFile(cluster + "tls:\n  cert: c.pem\n  key: c.key\n", "c.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("needs all of cert, key and ca"));
  spec = ParseClusterFile(cluster + "tls:\n  certificate: c.pem\n", "c.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("unknown key `tls.certificate`"));
  spec = ParseClusterFile(cluster + "tls: yes\n", "c.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("`tls` must be a mapping"));
}

TEST(LoadClusterFileTest, ExampleIsValid) {
  auto spec = LoadClusterFile("examples/cluster.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->chief.size(), 1u);
  EXPECT_EQ(spec->worker.size(), 2u);
  EXPECT_EQ(spec->ps.size(), 2u);
  EXPECT_EQ(ListenAddressFor(spec->ps[0]), "0.0.0.0:2222");
}

TEST(LoadClusterFileTest, MissingFileIsNotFound) {
  auto spec = LoadClusterFile("/nonexistent/cluster.yaml");
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("/nonexistent/cluster.yaml"));
}

TEST(ListenAddressForTest, IpLiteralsAreBoundAsIsNamesOnEveryInterface) {
  EXPECT_EQ(ListenAddressFor("127.0.0.1:2222"), "127.0.0.1:2222");
  EXPECT_EQ(ListenAddressFor("[::1]:2222"), "[::1]:2222");
  EXPECT_EQ(ListenAddressFor("ps-0.ps.default.svc:2222"), "0.0.0.0:2222");
  EXPECT_EQ(ListenAddressFor("localhost:80"), "0.0.0.0:80");
}

TEST(CheckHostPortTest, MinPort) {
  EXPECT_TRUE(CheckHostPort("127.0.0.1:0", 0).ok());
  EXPECT_FALSE(CheckHostPort("127.0.0.1:0").ok());
  EXPECT_FALSE(CheckHostPort("::1:2222").ok());  // IPv6 needs brackets
}

TEST(ParseTaskTypeTest, RoundTrips) {
  for (TaskType t : {TaskType::kChief, TaskType::kWorker, TaskType::kPs, TaskType::kEvaluator}) {
    auto parsed = ParseTaskType(TaskTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_THAT(std::string(ParseTaskType("master").status().message()),
              HasSubstr("unknown task type 'master' (chief, worker, ps or evaluator)"));
}

}  // namespace
}  // namespace pscluster
