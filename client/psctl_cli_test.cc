#include "client/psctl_cli.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pscluster {
namespace {

// Parses `args` (without "psctl") as main would, with `env` as
// $PSCTL_COORDINATOR. Returns ParsePsctlCommandLine's exit code, -1 for "run".
int Parse(std::initializer_list<const char*> args, PsctlCommandLine* cl,
          const std::string& env = "") {
  std::vector<const char*> argv = {"psctl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::optional<int> done =
      ParsePsctlCommandLine(static_cast<int>(argv.size()), argv.data(), env, cl);
  return done ? *done : -1;
}

TEST(PsctlCliTest, LocalKeepsEveryFlagSpelling) {
  PsctlCommandLine cl;
  ASSERT_EQ(
      Parse({"local", "job.yaml", "--ps", "3", "--workers=4", "--output", "json",
             "--run_dir=/tmp/r", "--keep_run_dir", "--describe", "--no-restart", "--timeout_s",
             "2.5", "--metrics", "--ps_server_bin=/a", "--worker_server_bin", "/b", "--coordinator_bin=/c"},
            &cl),
      -1);
  EXPECT_EQ(cl.command, "local");
  EXPECT_EQ(cl.local.spec_path, "job.yaml");
  EXPECT_EQ(cl.local.num_ps, 3);
  EXPECT_EQ(cl.local.num_workers, 4);
  EXPECT_EQ(cl.local.output, OutputFormat::kJson);
  EXPECT_EQ(cl.local.run_dir, "/tmp/r");
  EXPECT_TRUE(cl.local.keep_run_dir);
  EXPECT_TRUE(cl.local.describe);
  EXPECT_TRUE(cl.local.metrics);
  EXPECT_FALSE(cl.local.restart);
  EXPECT_DOUBLE_EQ(cl.local.timeout_s, 2.5);
  EXPECT_EQ(cl.local.ps_server_bin, "/a");
  EXPECT_EQ(cl.local.worker_server_bin, "/b");
  EXPECT_EQ(cl.local.coordinator_bin, "/c");
}

TEST(PsctlCliTest, LocalDefaultsAndUnderscoreNoRestart) {
  PsctlCommandLine cl;
  ASSERT_EQ(Parse({"local", "--no_restart", "job.yaml"}, &cl), -1);
  EXPECT_EQ(cl.local.num_ps, 2);
  EXPECT_EQ(cl.local.num_workers, 2);
  EXPECT_EQ(cl.local.output, OutputFormat::kText);
  EXPECT_FALSE(cl.local.restart);
  EXPECT_FALSE(cl.local.keep_run_dir);
  EXPECT_FALSE(cl.local.metrics);
  EXPECT_TRUE(cl.local.log_level.empty());

  PsctlCommandLine plain;
  ASSERT_EQ(Parse({"local", "job.yaml"}, &plain), -1);
  EXPECT_TRUE(plain.local.restart);
}

TEST(PsctlCliTest, OutputAcceptsTableTextJsonYaml) {
  for (const auto& [name, format] :
       std::vector<std::pair<const char*, OutputFormat>>{{"table", OutputFormat::kText},
                                                         {"text", OutputFormat::kText},
                                                         {"json", OutputFormat::kJson},
                                                         {"yaml", OutputFormat::kYaml}}) {
    PsctlCommandLine cl;
    ASSERT_EQ(Parse({"list", "-o", name}, &cl), -1) << name;
    EXPECT_EQ(cl.output, format) << name;
  }
  PsctlCommandLine cl;
  EXPECT_EQ(Parse({"list", "-o", "xml"}, &cl), 2);
}

TEST(PsctlCliTest, CoordinatorDefaultsToTheEnvironmentAndTheFlagWins) {
  PsctlCommandLine from_env;
  ASSERT_EQ(Parse({"status", "job-1"}, &from_env, "10.0.0.1:5000"), -1);
  EXPECT_EQ(from_env.command, "status");
  EXPECT_EQ(from_env.argument, "job-1");
  EXPECT_EQ(from_env.coordinator, "10.0.0.1:5000");

  PsctlCommandLine flag;
  ASSERT_EQ(Parse({"watch", "job-1", "--coordinator=h:1"}, &flag, "10.0.0.1:5000"), -1);
  EXPECT_EQ(flag.coordinator, "h:1");
}

TEST(PsctlCliTest, EveryRemoteCommandParses) {
  for (const char* command : {"submit", "watch", "cancel", "describe", "logs"}) {
    PsctlCommandLine cl;
    ASSERT_EQ(Parse({command, "x", "--coordinator", "h:1"}, &cl), -1) << command;
    EXPECT_EQ(cl.command, command);
    EXPECT_EQ(cl.argument, "x");
  }
  PsctlCommandLine status_all;
  ASSERT_EQ(Parse({"status"}, &status_all), -1);
  EXPECT_TRUE(status_all.argument.empty());
  PsctlCommandLine list;
  ASSERT_EQ(Parse({"list"}, &list), -1);
  EXPECT_EQ(list.command, "list");
}

TEST(PsctlCliTest, RescaleAndLocalJobPs) {
  PsctlCommandLine cl;
  ASSERT_EQ(Parse({"rescale", "job-1", "--ps", "3", "--coordinator", "h:1", "-o", "json"}, &cl),
            -1);
  EXPECT_EQ(cl.command, "rescale");
  EXPECT_EQ(cl.argument, "job-1");
  EXPECT_EQ(cl.rescale_ps, 3);
  EXPECT_EQ(cl.output, OutputFormat::kJson);
  // --ps is required; its range is the coordinator's to judge (it knows its PS).
  PsctlCommandLine no_ps;
  EXPECT_EQ(Parse({"rescale", "job-1"}, &no_ps), 2);

  PsctlCommandLine local;
  ASSERT_EQ(Parse({"local", "job.yaml", "--ps", "3", "--job_ps", "2"}, &local), -1);
  EXPECT_EQ(local.local.num_ps, 3);
  EXPECT_EQ(local.local.job_ps, 2);
  PsctlCommandLine zero;
  EXPECT_EQ(Parse({"local", "job.yaml", "--job_ps", "0"}, &zero), 2);
}

TEST(PsctlCliTest, CheckpointVerify) {
  PsctlCommandLine cl;
  ASSERT_EQ(Parse({"checkpoint", "verify", "/ckpt", "--ps", "3", "--output=json"}, &cl), -1);
  EXPECT_EQ(cl.command, "checkpoint verify");
  EXPECT_EQ(cl.argument, "/ckpt");
  EXPECT_EQ(cl.verify_ps, 3);
  EXPECT_EQ(cl.output, OutputFormat::kJson);

  PsctlCommandLine as_saved;
  ASSERT_EQ(Parse({"checkpoint", "verify", "/ckpt"}, &as_saved), -1);
  EXPECT_EQ(as_saved.verify_ps, 0);
}

TEST(PsctlCliTest, Export) {
  PsctlCommandLine cl;
  ASSERT_EQ(Parse({"export", "/ckpt", "--format", "onnx", "-o", "model.onnx"}, &cl), -1);
  EXPECT_EQ(cl.command, "export");
  EXPECT_EQ(cl.argument, "/ckpt");
  EXPECT_EQ(cl.export_format, "onnx");
  EXPECT_EQ(cl.export_path, "model.onnx");

  PsctlCommandLine no_file, other_format;
  EXPECT_EQ(Parse({"export", "/ckpt"}, &no_file), 2);
  EXPECT_EQ(Parse({"export", "/ckpt", "--format", "savedmodel", "-o", "m"}, &other_format), 2);
}

TEST(PsctlCliTest, Predict) {
  PsctlCommandLine cl;
  ASSERT_EQ(Parse({"predict", "ckpt", "-o", "p.csv", "--data", "rows.yaml", "--workers=3",
                   "--closure_rows", "7", "--no_restart", "--run_dir", "/tmp/r"},
                  &cl),
            -1);
  EXPECT_EQ(cl.command, "predict");
  EXPECT_EQ(cl.argument, "ckpt");
  EXPECT_EQ(cl.predict_path, "p.csv");
  EXPECT_EQ(cl.predict_data, "rows.yaml");
  EXPECT_EQ(cl.predict_closure_rows, 7);
  EXPECT_EQ(cl.local.num_workers, 3);
  EXPECT_EQ(cl.local.num_ps, 2);
  EXPECT_FALSE(cl.local.restart);
  EXPECT_EQ(cl.local.run_dir, "/tmp/r");
  PsctlCommandLine defaults;
  ASSERT_EQ(Parse({"predict", "job.yaml", "--output=p.csv"}, &defaults), -1);
  EXPECT_EQ(defaults.predict_closure_rows, 500);
  EXPECT_TRUE(defaults.predict_data.empty());
  // -o is required; rows per closure must be positive.
  PsctlCommandLine bad;
  EXPECT_EQ(Parse({"predict", "ckpt"}, &bad), 2);
  EXPECT_EQ(Parse({"predict", "ckpt", "-o", "p.csv", "--closure_rows", "0"}, &bad), 2);
}

TEST(PsctlCliTest, LogLevelIsGlobal) {
  PsctlCommandLine before;
  ASSERT_EQ(Parse({"--log_level", "debug", "local", "job.yaml"}, &before), -1);
  EXPECT_EQ(before.local.log_level, "debug");
  PsctlCommandLine after;
  ASSERT_EQ(Parse({"local", "job.yaml", "--log_level=warn"}, &after), -1);
  EXPECT_EQ(after.local.log_level, "warn");
  PsctlCommandLine bad;
  EXPECT_EQ(Parse({"local", "job.yaml", "--log_level=loud"}, &bad), 2);
}

TEST(PsctlCliTest, HelpAndVersionExitZero) {
  testing::internal::CaptureStdout();
  PsctlCommandLine a, b, c, d;
  EXPECT_EQ(Parse({"--help"}, &a), 0);
  EXPECT_EQ(Parse({"-h"}, &b), 0);
  EXPECT_EQ(Parse({"local", "--help"}, &c), 0);
  EXPECT_EQ(Parse({"--version"}, &d), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, testing::HasSubstr("--keep_run_dir"));  // local's own help
  EXPECT_THAT(out, testing::HasSubstr("Exit codes"));
  EXPECT_THAT(out, testing::HasSubstr("psctl 0."));
}

TEST(PsctlCliTest, UsageErrorsExitTwo) {
  testing::internal::CaptureStderr();
  PsctlCommandLine a, b, c, d, e, f;
  EXPECT_EQ(Parse({}, &a), 2);                                // no command
  EXPECT_EQ(Parse({"frobnicate"}, &b), 2);                    // unknown command
  EXPECT_EQ(Parse({"local"}, &c), 2);                         // no JOB.yaml
  EXPECT_EQ(Parse({"local", "j.yaml", "--ps", "0"}, &d), 2);  // out of range
  EXPECT_EQ(Parse({"watch", "a", "b"}, &e), 2);               // extra argument
  EXPECT_EQ(Parse({"status", "--no_such_flag"}, &f), 2);
  testing::internal::GetCapturedStderr();
}

}  // namespace
}  // namespace pscluster
