// security_attack: a stranger's (or a rogue insider's) RPCs against a running
// cluster, for tests/security_test.sh. Each --attack sends what a user with
// a small gRPC client could send, prints one line
//   ATTACK <name>: <CODE> <message>
// and exits 0 when the answer's code is --expect, 1 otherwise (2: bad flags).
//
// The transport flags are the servers' own (--tls_cert, --tls_key, --tls_ca,
// --max_message_bytes): without them the attack is made in plaintext.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/control_auth.h"
#include "common/tensor.h"
#include "common/update_lease.h"
#include "protos/coordinator.grpc.pb.h"
#include "protos/ps.grpc.pb.h"
#include "protos/worker.grpc.pb.h"
#include "rpc/rpc_util.h"
#include "rpc/server_flags.h"

ABSL_FLAG(std::string, attack, "", "which attack (see Attack() below)");
ABSL_FLAG(std::string, target, "", "host:port of the server attacked");
ABSL_FLAG(std::string, job, "", "the job attacked (a job id)");
ABSL_FLAG(std::string, arg, "", "the attack's argument (a path, a spec file, a name)");
ABSL_FLAG(std::string, token, "", "bearer token sent to the coordinator");
ABSL_FLAG(std::string, expect, "", "the status code the attack must get, e.g. PERMISSION_DENIED");
ABSL_FLAG(int, count, 1, "how many times (future_keys: how many keys)");
ABSL_FLAG(std::string, secret_file, "",
          "key_end_job: the coordinator's lease secret (--state_dir/lease_secret), as a second "
          "coordinator or an insider who stole it would hold it");

namespace pscluster {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return "OK";
    case grpc::CANCELLED: return "CANCELLED";
    case grpc::UNKNOWN: return "UNKNOWN";
    case grpc::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND: return "NOT_FOUND";
    case grpc::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::ABORTED: return "ABORTED";
    case grpc::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::INTERNAL: return "INTERNAL";
    case grpc::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::DATA_LOSS: return "DATA_LOSS";
    default: return "?";
  }
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  SetDeadline(ctx.get(), std::chrono::seconds(10));
  return ctx;
}

// The job's first dense variable on this PS (its name and shape are all
// a client needs to push to it).
grpc::Status FirstDenseVariable(ParameterServer::Stub* ps, const std::string& job,
                                VariableStats* out) {
  StatsRequest request;
  request.set_job(job);
  StatsResponse stats;
  auto ctx = Context();
  if (grpc::Status s = ps->Stats(ctx.get(), request, &stats); !s.ok()) return s;
  for (const VariableStats& v : stats.variables()) {
    if (v.kind() == DENSE) {
      *out = v;
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::FAILED_PRECONDITION, "the job has no dense variable here");
}

PushRequest GradientOf(const std::string& job, const VariableStats& v, float value) {
  PushRequest push;
  push.set_job(job);
  int64_t n = 1;
  for (int64_t d : v.shape()) n *= d;
  NamedTensor* g = push.add_gradients();
  g->set_name(v.name());
  EncodeTensor(std::vector<int64_t>(v.shape().begin(), v.shape().end()),
               std::vector<float>(static_cast<size_t>(n), value), g->mutable_tensor());
  return push;
}

CreateVariablesRequest OneVariable(const std::string& job, int64_t size) {
  CreateVariablesRequest create;
  create.set_job(job);
  VariableSpecProto* spec = create.add_variables();
  spec->set_name("w");
  spec->set_dtype(DT_FLOAT32);
  spec->add_shape(size);
  spec->mutable_initializer()->set_type("constant");
  spec->mutable_optimizer()->set_type("sgd");
  spec->mutable_optimizer()->set_learning_rate(0.1f);
  return create;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

grpc::Status Attack(const std::string& attack, const std::string& target) {
  const std::string job = absl::GetFlag(FLAGS_job);
  const std::string arg = absl::GetFlag(FLAGS_arg);
  auto channel = MakeChannel(target, absl::GetFlag(FLAGS_token));
  auto ps = ParameterServer::NewStub(channel);
  if (attack == "ps_stats") {
    StatsResponse r;
    return ps->Stats(Context().get(), StatsRequest(), &r);
  }
  if (attack == "ps_save") {  // write a checkpoint file wherever --arg says
    SaveRequest save;
    save.set_job(job);
    save.set_name(arg);
    SaveResponse r;
    return ps->Save(Context().get(), save, &r);
  }
  if (attack == "ps_restore_wipe") {  // Restore{num_ps: 1} of nothing into the job
    RestoreRequest restore;
    restore.set_job(job);
    restore.set_num_ps(1);
    restore.mutable_variables()->set_job(job);
    RestoreResponse r;
    return ps->Restore(Context().get(), restore, &r);
  }
  if (attack == "ps_restore_path") {  // restore from a file outside the root
    RestoreRequest restore;
    restore.set_job(job);
    restore.set_num_ps(1);
    restore.add_files()->set_name(arg);
    restore.mutable_variables()->set_job(job);
    RestoreResponse r;
    return ps->Restore(Context().get(), restore, &r);
  }
  if (attack == "ps_recreate") {  // take the job over with a key of our own
    CreateVariablesRequest create = OneVariable(job, 4);
    create.set_job_key(RandomSecret());
    CreateVariablesResponse r;
    return ps->CreateVariables(Context().get(), create, &r);
  }
  if (attack == "ps_push_nan" || attack == "ps_push_nan_keyed") {
    // NaN into the job's first dense variable; _keyed claims an update key
    // (without the coordinator's lease).
    VariableStats v;
    if (grpc::Status s = FirstDenseVariable(ps.get(), job, &v); !s.ok()) return s;
    PushRequest push = GradientOf(job, v, std::numeric_limits<float>::quiet_NaN());
    if (attack == "ps_push_nan_keyed") {
      push.mutable_update()->set_closure_id(0);
      push.mutable_update()->set_step(0);
    }
    PushResponse r;
    return ps->Push(Context().get(), push, &r);
  }
  if (attack == "ps_push_nan_own") {  // NaN into a namespace of our own: the PS guard alone
    CreateVariablesResponse created;
    grpc::Status s = ps->CreateVariables(Context().get(), OneVariable(job, 16), &created);
    if (!s.ok()) return s;
    VariableStats v;
    v.set_name("w");
    v.add_shape(16);
    PushRequest push = GradientOf(job, v, std::numeric_limits<float>::infinity());
    PushResponse r;
    return ps->Push(Context().get(), push, &r);
  }
  if (attack == "ps_future_keys") {
    // Empty pushes claiming keys of closures not run yet: had the PS taken
    // them, it would drop the real steps as duplicates. Every one must be
    // refused; the first answer that is not the expected code is returned.
    const int count = absl::GetFlag(FLAGS_count);
    grpc::Status last;
    for (int i = 0; i < count; ++i) {
      PushRequest push;
      push.set_job(job);
      push.mutable_update()->set_closure_id((int64_t{i / 20} << 32) | 0);
      push.mutable_update()->set_step(i % 20);
      push.mutable_update()->set_lease(std::string(kLeaseBytes, '\x01'));
      push.mutable_update()->set_lease_steps(20);
      PushResponse r;
      last = ps->Push(Context().get(), push, &r);
      if (CodeName(last.error_code()) != absl::GetFlag(FLAGS_expect)) {
        return grpc::Status(last.error_code(),
                            absl::StrCat("push ", i, " of ", count, ": ", last.error_message()));
      }
    }
    return grpc::Status(last.error_code(),
                        absl::StrCat(count, " pushes, every one: ", last.error_message()));
  }
  // --- Issue 22: control RPCs into the running job without its
  // coordinator's proof. Each must be refused and change nothing.
  if (attack == "ps_prune_all") {  // every later push would be a duplicate
    PruneKeysRequest prune;
    prune.set_job(job);
    prune.set_below_closure_id(int64_t{1} << 62);
    PruneKeysResponse r;
    return ps->PruneKeys(Context().get(), prune, &r);
  }
  if (attack == "ps_end_job") {  // the job's state gone before a checkpoint
    EndJobRequest end;
    end.set_job(job);
    EndJobResponse r;
    return ps->EndJob(Context().get(), end, &r);
  }
  if (attack == "ps_end_then_create") {
    // End the namespace, then re-create it without a key, so that the
    // workers' pushes land in the attacker's variables. The first answer
    // that is not a refusal is returned.
    EndJobRequest end;
    end.set_job(job);
    EndJobResponse ended;
    grpc::Status s = ps->EndJob(Context().get(), end, &ended);
    if (s.ok()) return grpc::Status(grpc::OK, "EndJob was taken");
    CreateVariablesResponse r;
    grpc::Status c = ps->CreateVariables(Context().get(), OneVariable(job, 4), &r);
    if (c.error_code() != s.error_code()) return c;
    return grpc::Status(c.error_code(), absl::StrCat("EndJob: ", s.error_message(),
                                                     "; CreateVariables: ", c.error_message()));
  }
  if (attack == "key_end_job") {
    // EndJob signed with the job's real key: the damage a holder of the
    // coordinator's secret can do. The PS must take it; the coordinator must
    // then not report SUCCEEDED with unexplained missing steps.
    const std::string secret = ReadFile(absl::GetFlag(FLAGS_secret_file));
    if (secret.size() != kJobKeyBytes) {
      return grpc::Status(grpc::INVALID_ARGUMENT, "--secret_file holds no lease secret");
    }
    EndJobRequest end;
    end.set_job(job);
    SignRequest(DeriveJobKey(secret, job), "EndJob", &end);
    EndJobResponse r;
    grpc::Status s = ps->EndJob(Context().get(), end, &r);
    if (s.ok() && !r.existed()) return grpc::Status(grpc::NOT_FOUND, "the PS held no such job");
    return s;
  }
  if (attack == "ps_stats_job") {  // read the job's variables and counters
    StatsRequest stats;
    stats.set_job(job);
    StatsResponse r;
    return ps->Stats(Context().get(), stats, &r);
  }
  if (attack == "ps_pull_job") {  // read the model without a closure's lease
    PullRequest pull;
    pull.set_job(job);
    pull.add_names(arg.empty() ? "w" : arg);
    PullResponse r;
    return ps->Pull(Context().get(), pull, &r);
  }
  if (attack == "ps_save_flood") {
    // Saves of the running job under new names, --count times: each would
    // write a full copy of the job's variables. Every one must be refused.
    const int count = absl::GetFlag(FLAGS_count);
    grpc::Status last;
    for (int i = 0; i < count; ++i) {
      SaveRequest save;
      save.set_job(job);
      save.set_name(absl::StrCat(arg, "/flood-", i, ".data"));
      SaveResponse r;
      last = ps->Save(Context().get(), save, &r);
      if (CodeName(last.error_code()) != absl::GetFlag(FLAGS_expect)) {
        return grpc::Status(last.error_code(),
                            absl::StrCat("save ", i, " of ", count, ": ", last.error_message()));
      }
    }
    return grpc::Status(last.error_code(),
                        absl::StrCat(count, " saves, every one: ", last.error_message()));
  }
  if (attack == "ps_create_empty_job") {  // 1 GiB in the job id "" (for ever)
    CreateVariablesResponse r;
    return ps->CreateVariables(Context().get(), OneVariable("", int64_t{1} << 28), &r);
  }
  if (attack == "ps_create_huge") {  // 2^28 floats (1 GiB) in a namespace of our own
    CreateVariablesResponse r;
    return ps->CreateVariables(Context().get(), OneVariable(job, int64_t{1} << 28), &r);
  }
  if (attack == "ps_oversized") {  // a push far above the message limit
    // Connect first (the handshake must not race 300 MiB of serialisation
    // on a loaded machine), then allow the transfer time.
    StatsResponse stats;
    if (grpc::Status s = ps->Stats(Context().get(), StatsRequest(), &stats); !s.ok()) return s;
    VariableStats v;
    v.set_name("w");
    v.add_shape((int64_t{300} << 20) / 4);
    PushRequest push = GradientOf(job, v, 0.0f);
    PushResponse r;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, std::chrono::seconds(120));
    return ps->Push(&ctx, push, &r);
  }
  auto coordinator = Coordinator::NewStub(channel);
  if (attack == "coordinator_list") {
    ListJobsResponse r;
    return coordinator->ListJobs(Context().get(), ListJobsRequest(), &r);
  }
  if (attack == "coordinator_cancel") {
    CancelJobRequest cancel;
    cancel.set_job_id(job);
    CancelJobResponse r;
    return coordinator->CancelJob(Context().get(), cancel, &r);
  }
  if (attack == "coordinator_submit") {  // --arg: a job spec file
    SubmitJobRequest submit;
    submit.set_spec_yaml(ReadFile(arg));
    submit.set_spec_path(arg);
    SubmitJobResponse r;
    return coordinator->SubmitJob(Context().get(), submit, &r);
  }
  auto worker = Worker::NewStub(channel);
  if (attack == "worker_ping") {
    PingResponse r;
    return worker->Ping(Context().get(), PingRequest(), &r);
  }
  if (attack == "worker_setup") {  // --arg: a job spec file; switch the worker to it
    SetupJobRequest setup;
    setup.set_job_id(job.empty() ? "stranger" : job);
    setup.set_spec_yaml(ReadFile(arg));
    SetupJobResponse r;
    return worker->SetupJob(Context().get(), setup, &r);
  }
  if (attack == "worker_closure") {  // a closure of the worker's job, unsigned
    RunClosureRequest closure;
    closure.set_job_id(job);
    closure.set_closure_id(1);
    closure.set_mode(TRAIN);
    closure.mutable_split()->set_end(32);
    RunClosureResponse r;
    return worker->RunClosure(Context().get(), closure, &r);
  }
  return grpc::Status(grpc::INVALID_ARGUMENT, "unknown --attack " + attack);
}

int Main(int argc, char** argv) {
  absl::StatusOr<ServerOptions> options = ParseServerCommandLine(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "security_attack: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (absl::Status s = ConfigureTransport(options->transport); !s.ok()) {
    std::fprintf(stderr, "security_attack: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  const std::string attack = absl::GetFlag(FLAGS_attack);
  const grpc::Status s = Attack(attack, absl::GetFlag(FLAGS_target));
  const std::string code = CodeName(s.error_code());
  std::printf("ATTACK %s: %s %s\n", attack.c_str(), code.c_str(), s.error_message().c_str());
  return code == absl::GetFlag(FLAGS_expect) ? 0 : 1;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) { return pscluster::Main(argc, argv); }
