// psctl: the pscluster command line.
//
//   psctl local JOB.yaml [--ps N] [--workers M] [--output text|json] ...
//       runs the job on a cluster of child processes on 127.0.0.1
//   psctl submit JOB.yaml --coordinator HOST:PORT   prints the job id
//   psctl status [JOB_ID] --coordinator HOST:PORT
//   psctl watch JOB_ID --coordinator HOST:PORT
//   psctl cancel JOB_ID --coordinator HOST:PORT
//   psctl describe JOB_ID --coordinator HOST:PORT   variable layout and PS load
//   psctl list --coordinator HOST:PORT
//   psctl checkpoint verify DIR [--ps N]   lists checkpoints, restores the newest good one
//
// Exit codes: 0 success, 1 the job or an RPC failed (checkpoint verify: no
// checkpoint restores), 2 bad input (usage, job spec, missing data file or
// directory), 130 interrupted by SIGINT/SIGTERM.
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/checkpoint_verify.h"
#include "client/job_watch.h"
#include "client/describe.h"
#include "client/local_run.h"
#include "client/result_json.h"
#include "client/one_device.h"
#include "client/local_run_options.h"
#include "client/progress.h"
#include "common/job_spec.h"
#include "protos/coordinator.grpc.pb.h"
#include "rpc/rpc_util.h"

ABSL_FLAG(int32_t, ps, 2,
          "local: number of ps_server processes; checkpoint verify: PS to restore into "
          "(default: as many as saved the checkpoint)");
ABSL_FLAG(int32_t, workers, 2, "local: number of worker_server processes");
ABSL_FLAG(std::string, output, "text",
          "text (progress and a summary) or json (one JSON object on stdout at the end)");
ABSL_FLAG(std::string, run_dir, "",
          "local: directory for logs and port files (default: a fresh /tmp/psctl-XXXXXX, "
          "removed at exit unless --keep_run_dir)");
ABSL_FLAG(bool, keep_run_dir, false, "local: keep the temporary run directory");
ABSL_FLAG(bool, describe, false,
          "local: at the end, print each variable's layout over the PS tasks and the bytes each "
          "PS holds");
ABSL_FLAG(bool, no_restart, false,
          "local: do not restart a server that dies during the job (also spelled "
          "--no-restart); by default psctl restarts it at the same address, as Kubernetes "
          "would");
ABSL_FLAG(double, timeout_s, 0, "local: cancel the job after this many seconds (0: no limit)");
ABSL_FLAG(std::string, ps_server_bin, "", "local: ps_server binary (default: next to psctl)");
ABSL_FLAG(std::string, worker_server_bin, "",
          "local: worker_server binary (default: next to psctl)");
ABSL_FLAG(std::string, coordinator_bin, "", "local: coordinator binary (default: next to psctl)");
ABSL_FLAG(std::string, coordinator, "",
          "submit/status/watch/cancel/list/describe: coordinator HOST:PORT");

namespace pscluster {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr auto kRpcTimeout = std::chrono::seconds(10);

constexpr char kUsage[] = R"(usage:
  psctl local JOB.yaml [--ps N] [--workers M] [--output text|json] [--run_dir DIR]
                       [--keep_run_dir] [--timeout_s S] [--describe] [--no_restart]
                       [--ps_server_bin P] [--worker_server_bin P] [--coordinator_bin P]
  psctl submit JOB.yaml --coordinator HOST:PORT
  psctl status [JOB_ID] --coordinator HOST:PORT [--output text|json]
  psctl watch JOB_ID --coordinator HOST:PORT [--output text|json]
  psctl cancel JOB_ID --coordinator HOST:PORT
  psctl describe JOB_ID --coordinator HOST:PORT [--output text|json]
  psctl list --coordinator HOST:PORT [--output text|json]
  psctl checkpoint verify DIR [--ps N] [--output text|json]
)";

int Usage(const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "psctl: %s\n", problem.c_str());
  std::fprintf(stderr, "%s", kUsage);
  return kExitUsage;
}

int RpcError(const char* rpc, const grpc::Status& status) {
  std::fprintf(stderr, "psctl: %s: %s\n", rpc,
               std::string(FromGrpcStatus(status).ToString()).c_str());
  return status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? kExitUsage : kExitFailed;
}

bool ParseOutput(OutputFormat* out) {
  const std::string v = absl::GetFlag(FLAGS_output);
  if (v == "text") *out = OutputFormat::kText;
  else if (v == "json") *out = OutputFormat::kJson;
  else return false;
  return true;
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

// Parses the job spec and checks its data files; prints why not to stderr.
absl::StatusOr<JobSpec> LoadAndCheckSpec(const std::string& path) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return spec.status();
  }
  for (const std::string& file : DataFiles(*spec)) {
    if (access(file.c_str(), F_OK) != 0) {
      std::fprintf(stderr, "data file not found: %s\n", file.c_str());
      return absl::NotFoundError(file);
    }
    if (access(file.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "data file not readable: %s\n", file.c_str());
      return absl::PermissionDeniedError(file);
    }
  }
  return spec;
}

int RunLocal(const std::vector<char*>& args) {
  if (args.size() != 3) return Usage("local takes exactly one JOB.yaml");
  LocalRunOptions options;
  options.spec_path = args[2];
  options.num_ps = absl::GetFlag(FLAGS_ps);
  options.num_workers = absl::GetFlag(FLAGS_workers);
  options.run_dir = absl::GetFlag(FLAGS_run_dir);
  options.keep_run_dir = absl::GetFlag(FLAGS_keep_run_dir);
  options.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  options.ps_server_bin = absl::GetFlag(FLAGS_ps_server_bin);
  options.worker_server_bin = absl::GetFlag(FLAGS_worker_server_bin);
  options.coordinator_bin = absl::GetFlag(FLAGS_coordinator_bin);
  options.describe = absl::GetFlag(FLAGS_describe);
  options.restart = !absl::GetFlag(FLAGS_no_restart);
  if (!ParseOutput(&options.output)) return Usage("--output must be text or json");
  if (options.num_ps < 1 || options.num_workers < 1) {
    return Usage("--ps and --workers must be at least 1");
  }
  if (options.timeout_s < 0) return Usage("--timeout_s must be >= 0");
  absl::StatusOr<JobSpec> spec = LoadAndCheckSpec(options.spec_path);
  if (!spec.ok()) return kExitUsage;
  if (spec->strategy == Strategy::kOneDevice) {
    return RunOneDevice(*spec, options);
  }
  return RunParameterServerJob(*spec, options);
}

std::unique_ptr<Coordinator::Stub> ConnectOrNull() {
  const std::string target = absl::GetFlag(FLAGS_coordinator);
  if (target.empty()) return nullptr;
  return Coordinator::NewStub(MakeChannel(target));
}

int Submit(const std::vector<char*>& args, Coordinator::Stub* stub) {
  if (args.size() != 3) return Usage("submit takes exactly one JOB.yaml");
  // Validate locally first: the user gets file:line:col errors without a
  // round trip. Data paths are checked by the workers, which may see
  // another file system.
  absl::StatusOr<JobSpec> spec = LoadJobSpec(args[2]);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return kExitUsage;
  }
  SubmitJobRequest request;
  request.set_spec_yaml(spec->yaml);
  request.set_spec_path(args[2]);
  SubmitJobResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->SubmitJob(&ctx, request, &response);
  if (!s.ok()) return RpcError("SubmitJob", s);
  std::printf("%s\n", response.job_id().c_str());
  return kExitOk;
}

int List(Coordinator::Stub* stub, OutputFormat output) {
  ListJobsResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->ListJobs(&ctx, ListJobsRequest(), &response);
  if (!s.ok()) return RpcError("ListJobs", s);
  if (output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(response).c_str());
    return kExitOk;
  }
  std::printf("%-28s %-24s %-10s %-7s %-13s %-8s %s\n", "JOB_ID", "NAME", "STATE", "EPOCH",
              "STEPS", "LOSS", "EVAL_ACC");
  for (const JobStatusProto& j : response.jobs()) {
    std::printf("%-28s %-24s %-10s %-7s %-13s %-8.4f %s\n", j.job_id().c_str(), j.name().c_str(),
                JobStateName(j.state()).c_str(),
                absl::StrCat(j.epoch(), "/", j.total_epochs()).c_str(),
                absl::StrCat(j.steps(), "/", j.total_steps()).c_str(), j.train_loss(),
                j.epochs_size() > 0 ? absl::StrFormat("%.4f", j.eval_accuracy()).c_str() : "-");
  }
  return kExitOk;
}

int Status(const std::vector<char*>& args, Coordinator::Stub* stub, OutputFormat output) {
  if (args.size() == 2) return List(stub, output);
  if (args.size() != 3) return Usage("status takes at most one JOB_ID");
  GetJobRequest request;
  request.set_job_id(args[2]);
  JobStatusProto job;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->GetJob(&ctx, request, &job);
  if (!s.ok()) return RpcError("GetJob", s);
  if (output == OutputFormat::kJson) {
    std::printf("%s\n", ToJson(job).c_str());
  } else {
    if (!IsFinalState(job.state())) std::printf("%s\n", FormatProgressLine(job).c_str());
    std::printf("%s", FormatSummary(job).c_str());
  }
  return kExitOk;
}

int Watch(const std::vector<char*>& args, Coordinator::Stub* stub, OutputFormat output) {
  if (args.size() != 3) return Usage("watch takes exactly one JOB_ID");
  const std::string job_id = args[2];
  const bool json = output == OutputFormat::kJson;
  ProgressPrinter printer(
      json ? stderr : stdout,
      !json && isatty(STDOUT_FILENO) ? ProgressPrinter::Mode::kBar : ProgressPrinter::Mode::kLines);
  absl::StatusOr<JobStatusProto> final_status;
  {
    JobWatch watch(stub, job_id,
                   [&printer](const JobStatusProto& st) { printer.Update(st, absl::Now()); });
    watch.WaitFor(absl::InfiniteDuration());
    if (!watch.stream_status().ok() && !watch.last()) {
      final_status = watch.stream_status();
    } else {
      final_status = FinalStatus(stub, job_id, watch, absl::Seconds(10));
    }
  }
  printer.Finish();
  if (!final_status.ok()) {
    std::fprintf(stderr, "psctl: WatchJob: %s\n", final_status.status().ToString().c_str());
    return kExitFailed;
  }
  if (json) {
    std::printf("%s\n", ToJson(*final_status).c_str());
  } else {
    std::printf("%s", FormatSummary(*final_status).c_str());
  }
  return final_status->state() == SUCCEEDED ? kExitOk : kExitFailed;
}

int Cancel(const std::vector<char*>& args, Coordinator::Stub* stub) {
  if (args.size() != 3) return Usage("cancel takes exactly one JOB_ID");
  CancelJobRequest request;
  request.set_job_id(args[2]);
  CancelJobResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->CancelJob(&ctx, request, &response);
  if (!s.ok()) return RpcError("CancelJob", s);
  std::printf("cancelled %s\n", args[2]);
  return kExitOk;
}

int Describe(const std::vector<char*>& args, Coordinator::Stub* stub, OutputFormat output) {
  if (args.size() != 3) return Usage("describe takes exactly one JOB_ID");
  DescribeJobRequest request;
  request.set_job_id(args[2]);
  DescribeJobResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->DescribeJob(&ctx, request, &response);
  if (!s.ok()) return RpcError("DescribeJob", s);
  if (output == OutputFormat::kJson) {
    std::printf("%s\n", DescribeJson(response).dump().c_str());
  } else {
    std::printf("%s", FormatDescribe(response).c_str());
  }
  return kExitOk;
}

// `checkpoint verify DIR`: exit 0 when a checkpoint restored, 1 when none
// did, 2 for bad usage or a missing directory.
// `ps_given`: --ps was on the command line (its default serves `local`).
int CheckpointVerify(const std::vector<char*>& args, OutputFormat output, bool ps_given) {
  if (args.size() != 4 || std::string(args[2]) != "verify") {
    return Usage("checkpoint takes: verify DIR");
  }
  CheckpointVerifyOptions options;
  options.dir = args[3];
  if (ps_given) {
    options.num_ps = absl::GetFlag(FLAGS_ps);
    if (options.num_ps < 1) return Usage("--ps must be at least 1");
  }
  absl::StatusOr<CheckpointVerifyReport> report = VerifyCheckpointDir(options);
  if (!report.ok()) {
    std::fprintf(stderr, "psctl: %s\n", std::string(report.status().message()).c_str());
    return kExitUsage;
  }
  if (output == OutputFormat::kJson) {
    std::printf("%s\n", CheckpointVerifyJson(*report).dump().c_str());
  } else {
    std::printf("%s", FormatCheckpointVerify(*report).c_str());
  }
  if (!report->restored) {
    std::fprintf(stderr, "psctl: no checkpoint restores: %s\n", report->error.c_str());
    return kExitFailed;
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // Flag names cannot hold '-'; accept the common spelling of this one.
  static char kNoRestart[] = "--no_restart";
  // This Abseil keeps CommandLineFlag::IsSpecifiedOnCommandLine private.
  bool ps_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-restart") argv[i] = kNoRestart;
    if (arg == "--") break;
    ps_given |= arg == "--ps" || arg == "-ps" || absl::StartsWith(arg, "--ps=") ||
                absl::StartsWith(arg, "-ps=");
  }
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) return Usage("");
  const std::string command = args[1];
  if (command == "local") return RunLocal(args);
  OutputFormat output;
  if (!ParseOutput(&output)) return Usage("--output must be text or json");
  if (command == "checkpoint") return CheckpointVerify(args, output, ps_given);
  if (command != "submit" && command != "status" && command != "watch" && command != "cancel" &&
      command != "list" && command != "describe") {
    return Usage(absl::StrCat("unknown command '", command, "'"));
  }
  std::unique_ptr<Coordinator::Stub> stub = ConnectOrNull();
  if (stub == nullptr) return Usage(absl::StrCat(command, " needs --coordinator HOST:PORT"));
  if (command == "submit") return Submit(args, stub.get());
  if (command == "status") return Status(args, stub.get(), output);
  if (command == "watch") return Watch(args, stub.get(), output);
  if (command == "cancel") return Cancel(args, stub.get());
  if (command == "describe") return Describe(args, stub.get(), output);
  if (args.size() != 2) return Usage("list takes no arguments");
  return List(stub.get(), output);
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
