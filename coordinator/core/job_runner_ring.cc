// JobRunner's elastic ring (docs/elastic_workers.md): a multi_worker_mirrored
// job re-forms its ring over the workers that hold the job, between two
// splits (PhaseRunner::FormReplicas calls ReformRing with nothing in
// flight). Members that left drop out; a joiner's copy is restored from a
// checkpoint taken at this very point, so every copy starts the next split
// from the same state; every member is set up again with the new ring.
#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "coordinator/core/job_runner.h"
#include "coordinator/core/signing_ps_client.h"

namespace pscluster {

PsClient* JobRunner::CopyOf(int w) {
  if (w >= 0 && static_cast<size_t>(w) < workers_.size()) {
    return static_cast<size_t>(w) < options_.worker_ps.size() ? options_.worker_ps[w] : nullptr;
  }
  auto it = joiner_copies_.find(w);
  return it != joiner_copies_.end() ? it->second.get() : nullptr;
}

absl::Status JobRunner::FormFirstRing() {
  if (!ElasticRing() || !ring_.empty()) return absl::OkStatus();
  std::vector<PsClient*> copies;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!options_.roster->active(static_cast<int>(w))) continue;
    ring_.push_back(static_cast<int>(w));
    copies.push_back(CopyOf(static_cast<int>(w)));
  }
  if (ring_.empty()) return absl::UnavailableError("every worker of the cluster has left it");
  mirrors_->SetCopies(std::move(copies));
  return absl::OkStatus();
}

std::vector<int> JobRunner::ReformRing(const std::vector<int>& members) {
  const absl::Time start = absl::Now();
  auto has = [](const std::vector<int>& v, int w) {
    return std::find(v.begin(), v.end(), w) != v.end();
  };
  std::vector<int> ring;
  for (int w : ring_) {
    if (has(members, w)) ring.push_back(w);
  }
  std::vector<int> joiners;
  for (int w : members) {
    // (One refused a copy is not asked again in this job.)
    if (!has(ring_, w) && refused_copies_.count(w) == 0) joiners.push_back(w);
  }
  if (ring.empty()) {
    // No copy left to bring a joiner to: the copies are gone, as when every
    // worker fails; the recovery restores them from the newest checkpoint.
    Event("replica_failed", "every member of the multi_worker_mirrored ring left it");
    Recovery()->MarkFailed();
    return ring_;
  }
  auto copies = [this](const std::vector<int>& of) {
    std::vector<PsClient*> out;
    for (int w : of) out.push_back(CopyOf(w));
    return out;
  };
  // Copy 0 (checkpoints, reads) is a member still there.
  mirrors_->SetCopies(copies(ring));
  const std::string why_not = checkpoints_ == nullptr
                                  ? "the job has no checkpoint.dir (a joiner's copy starts from a "
                                    "checkpoint taken as it joins)"
                                  : "";
  absl::Status saved = absl::OkStatus();
  bool restored = false;
  if (!joiners.empty() && why_not.empty()) saved = Checkpoint();
  for (int w : joiners) {
    WorkerClient* worker = options_.roster->client(w);
    absl::Status s = !why_not.empty() ? absl::FailedPreconditionError(why_not) : saved;
    if (s.ok() && CopyOf(w) == nullptr) {
      joiner_copies_[w] = options_.connect_copy(worker->address());
      signed_joiner_copies_[w] =
          std::make_unique<SigningPsClient>(joiner_copies_[w].get(), options_.lease_secret);
    }
    if (s.ok()) {
      // The checkpoint just taken (the newest): the ring's state now.
      absl::StatusOr<CheckpointManifest> m =
          checkpoints_->RestoreLatest(plan_, {signed_joiner_copies_[w].get()});
      s = m.status();
      if (m.ok() && m->global_step() != StepsCounted().first) {
        s = absl::InternalError(absl::StrCat("the newest checkpoint is of step ", m->global_step(),
                                             ", not the ring's ", StepsCounted().first));
      }
    }
    if (s.ok()) {
      ring.push_back(w);
      restored = true;
    } else if (refused_copies_.insert(w).second) {
      Event("worker_join_failed",
            absl::StrCat("worker ", w, " (", worker->address(),
                         ") holds the job but gets no copy of the multi_worker_mirrored ring: ",
                         s.ToString()));
    }
  }
  if (ring == ring_) return ring_;
  mirrors_->SetCopies(copies(ring));
  // Every member is set up with the new ring (replica r = ring[r]); the
  // workers keep their copies.
  std::vector<WorkerClient*> clients;
  std::vector<std::string> addresses;
  for (int w : ring) {
    clients.push_back(options_.roster->client(w));
    addresses.push_back(clients.back()->address());
  }
  setup_request_.clear_worker_addresses();
  for (const std::string& a : addresses) setup_request_.add_worker_addresses(a);
  SetLayoutInSetup();  // re-signed
  std::vector<absl::Status> status(clients.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] {
      SetupJobResponse response;
      status[i] = clients[i]->SetupJob(setup_request_, &response);
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<int> was = ring_;
  ring_ = ring;
  for (size_t i = 0; i < clients.size(); ++i) {
    if (status[i].ok()) continue;
    // Its closures would wait in a ring it is not in: roll every copy back.
    Event("replica_failed",
          absl::StrCat("worker ", ring[i], " (", addresses[i],
                       ") was not set up for the re-formed ring: ", status[i].ToString(),
                       "; rolling every copy back to the last checkpoint"));
    Recovery()->MarkFailed();
    break;
  }
  Event("ring_reformed",
        absl::StrCat("the multi_worker_mirrored ring is now workers [", absl::StrJoin(ring, ", "),
                     "] (was [", absl::StrJoin(was, ", "), "]), re-formed in ",
                     absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))),
                     restored ? ": a checkpoint, restored into the joiners' copies, and " : ": ",
                     "every member set up again"));
  return ring;
}

}  // namespace pscluster
