#include "client/psctl_remote.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/describe.h"
#include "client/exit_codes.h"
#include "client/job_watch.h"
#include "client/progress.h"
#include "client/result_json.h"
#include "common/job_spec.h"
#include "rpc/rpc_util.h"

namespace pscluster {
namespace {

constexpr auto kRpcTimeout = std::chrono::seconds(10);

// Prints why `rpc` failed and returns its exit code.
int RpcError(const char* rpc, const grpc::Status& status) {
  const absl::Status s = FromGrpcStatus(status);
  std::fprintf(stderr, "psctl: %s: %s\n", rpc, s.ToString().c_str());
  if (s.code() == absl::StatusCode::kUnimplemented) {
    std::fprintf(stderr, "psctl: this coordinator does not implement %s (an older version?)\n",
                 rpc);
  }
  return ExitCodeForRpcError(s.code());
}

int Submit(const std::string& spec_path, OutputFormat output, Coordinator::Stub* stub) {
  // Validate locally first: the user gets file:line:col errors without a
  // round trip. Data paths are checked by the workers, which may see
  // another file system.
  absl::StatusOr<JobSpec> spec = LoadJobSpec(spec_path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return kExitUsage;
  }
  SubmitJobRequest request;
  request.set_spec_yaml(spec->yaml);
  request.set_spec_path(spec_path);
  SubmitJobResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->SubmitJob(&ctx, request, &response);
  if (!s.ok()) return RpcError("SubmitJob", s);
  if (output == OutputFormat::kText) {
    std::printf("%s\n", response.job_id().c_str());
  } else {
    PrintStructured(SubmitJson(response), output);
  }
  return kExitOk;
}

int List(OutputFormat output, Coordinator::Stub* stub) {
  ListJobsResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->ListJobs(&ctx, ListJobsRequest(), &response);
  if (!s.ok()) return RpcError("ListJobs", s);
  if (output == OutputFormat::kText) {
    std::printf("%s", FormatJobTable(response).c_str());
  } else {
    PrintStructured(JobListJson(response), output);
  }
  return kExitOk;
}

int Status(const std::string& job_id, OutputFormat output, Coordinator::Stub* stub) {
  if (job_id.empty()) return List(output, stub);
  GetJobRequest request;
  request.set_job_id(job_id);
  JobStatusProto job;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->GetJob(&ctx, request, &job);
  if (!s.ok()) return RpcError("GetJob", s);
  if (output != OutputFormat::kText) {
    PrintStructured(JobStatusJson(job), output);
  } else {
    if (job.state() != QUEUED && !IsFinalState(job.state())) {
      std::printf("%s\n", FormatProgressLine(job).c_str());
    }
    std::printf("%s", FormatSummary(job).c_str());
  }
  return kExitOk;
}

int Watch(const std::string& job_id, OutputFormat output, Coordinator::Stub* stub) {
  const bool text = output == OutputFormat::kText;
  ProgressPrinter printer(text ? stdout : stderr, text && isatty(STDOUT_FILENO)
                                                      ? ProgressPrinter::Mode::kBar
                                                      : ProgressPrinter::Mode::kLines);
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
    return ExitCodeForRpcError(final_status.status().code());
  }
  if (text) {
    std::printf("%s", FormatSummary(*final_status).c_str());
  } else {
    if (final_status->already_complete()) {
      std::fprintf(stderr, "psctl: %s\n", AlreadyCompleteNotice(*final_status, "").c_str());
    }
    PrintStructured(JobStatusJson(*final_status), output);
  }
  return ExitCodeForJob(*final_status);
}

int Cancel(const std::string& job_id, Coordinator::Stub* stub) {
  CancelJobRequest request;
  request.set_job_id(job_id);
  CancelJobResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->CancelJob(&ctx, request, &response);
  if (!s.ok()) return RpcError("CancelJob", s);
  std::printf("cancelled %s\n", job_id.c_str());
  return kExitOk;
}

int Describe(const std::string& job_id, OutputFormat output, Coordinator::Stub* stub) {
  DescribeJobRequest request;
  request.set_job_id(job_id);
  DescribeJobResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->DescribeJob(&ctx, request, &response);
  if (!s.ok()) return RpcError("DescribeJob", s);
  if (output == OutputFormat::kText) {
    std::printf("%s", FormatDescribe(response).c_str());
  } else {
    PrintStructured(DescribeJson(response), output);
  }
  return kExitOk;
}

int Logs(const std::string& job_id, OutputFormat output, Coordinator::Stub* stub) {
  GetJobEventsRequest request;
  request.set_job_id(job_id);
  GetJobEventsResponse response;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kRpcTimeout);
  grpc::Status s = stub->GetJobEvents(&ctx, request, &response);
  if (!s.ok()) return RpcError("GetJobEvents", s);
  if (output == OutputFormat::kText) {
    std::printf("%s", FormatJobEvents(response).c_str());
  } else {
    PrintStructured(JobEventsJson(job_id, response), output);
  }
  return kExitOk;
}

}  // namespace

int RunRescale(const std::string& job_id, int num_ps, OutputFormat output,
               Coordinator::Stub* stub) {
  RescaleJobRequest request;
  request.set_job_id(job_id);
  request.set_num_ps(num_ps);
  RescaleJobResponse response;
  grpc::ClientContext ctx;
  // The coordinator answers once the job runs on the new PS, or after up to
  // 120 s without a point to rescale at.
  SetDeadline(&ctx, std::chrono::seconds(180));
  grpc::Status s = stub->RescaleJob(&ctx, request, &response);
  if (!s.ok()) return RpcError("RescaleJob", s);
  if (output == OutputFormat::kText) {
    if (response.old_num_ps() == response.num_ps()) {
      std::printf("%s already runs on %d PS\n", job_id.c_str(), response.num_ps());
    } else {
      std::printf("rescaled %s from %d to %d PS at step %lld (checkpoint %lld): paused %.1f ms\n",
                  job_id.c_str(), response.old_num_ps(), response.num_ps(),
                  static_cast<long long>(response.step()),
                  static_cast<long long>(response.checkpoint_id()), response.pause_ms());
    }
  } else {
    PrintStructured({{"job_id", job_id},
                     {"old_num_ps", response.old_num_ps()},
                     {"num_ps", response.num_ps()},
                     {"pause_ms", response.pause_ms()},
                     {"checkpoint_id", response.checkpoint_id()},
                     {"step", response.step()}},
                    output);
  }
  return kExitOk;
}

std::string FormatJobTable(const ListJobsResponse& jobs) {
  std::string out = absl::StrFormat("%-28s %-24s %-10s %-6s %-7s %-13s %-8s %s\n", "JOB_ID", "NAME",
                                    "STATE", "QUEUE", "EPOCH", "STEPS", "LOSS", "EVAL_ACC");
  for (const JobStatusProto& j : jobs.jobs()) {
    const bool queued = j.state() == QUEUED;
    absl::StrAppendFormat(&out, "%-28s %-24s %-10s %-6s %-7s %-13s %-8s %s\n", j.job_id(), j.name(),
                          JobStateName(j.state()), queued ? absl::StrCat(j.queue_position()) : "-",
                          absl::StrCat(j.epoch(), "/", j.total_epochs()),
                          absl::StrCat(j.steps(), "/", j.total_steps()),
                          queued ? "-" : absl::StrFormat("%.4f", j.train_loss()),
                          j.epochs_size() > 0 && (j.eval_mode().empty() || j.eval_mode() == "inline")
                              ? absl::StrFormat("%.4f", j.eval_accuracy())
                              : "-");
  }
  return out;
}

std::string FormatJobEvents(const GetJobEventsResponse& events) {
  std::string out = absl::StrFormat("%-24s %-18s %s\n", "TIME", "KIND", "MESSAGE");
  for (const JobEvent& e : events.events()) {
    const absl::Time t = absl::FromUnixMicros(static_cast<int64_t>(e.unix_seconds() * 1e6));
    absl::StrAppendFormat(&out, "%-24s %-18s %s\n",
                          absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone()),
                          e.kind(), e.message());
  }
  return out;
}

int RunRemoteCommand(const std::string& command, const std::string& argument, OutputFormat output,
                     Coordinator::Stub* stub) {
  if (command == "submit") return Submit(argument, output, stub);
  if (command == "status") return Status(argument, output, stub);
  if (command == "watch") return Watch(argument, output, stub);
  if (command == "cancel") return Cancel(argument, stub);
  if (command == "describe") return Describe(argument, output, stub);
  if (command == "logs") return Logs(argument, output, stub);
  return List(output, stub);
}

}  // namespace pscluster
