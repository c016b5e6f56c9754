// Writes the seed inputs of ps_requests_fuzzer (fuzz/corpus/ps_requests/) to
// the directory given as argv[1]: small, valid request sequences against the
// variables the fuzzer starts from (dense_0/kernel [4, 3], dense_0/bias [3],
// embedding/cat [8, 2], hash table embedding/user/part_0 [2]).
//   bazel run //fuzz:make_ps_corpus -- "$PWD/fuzz/corpus/ps_requests"
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz/ps_fuzz_input.h"
#include "protos/ps.pb.h"

namespace pscluster {
namespace {

using fuzz::AppendRecord;
using fuzz::PsOp;

std::string Ids(const std::vector<uint64_t>& ids) {
  std::string out;
  for (uint64_t id : ids) {
    for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
  }
  return out;
}

TensorProto Floats(const std::vector<int64_t>& shape, float value) {
  TensorProto t;
  t.set_dtype(DT_FLOAT32);
  int64_t n = 1;
  for (int64_t d : shape) {
    t.add_shape(d);
    n *= d;
  }
  std::vector<float> v(n, value);
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return t;
}

PullRequest PullAll() {
  PullRequest pull;
  pull.set_job("fuzz");
  pull.add_names("dense_0/kernel");
  pull.add_names("dense_0/bias");
  RowIds* rows = pull.add_lookups();
  rows->set_name("embedding/cat");
  rows->set_ids(Ids({0, 7, 0}));
  rows = pull.add_lookups();
  rows->set_name("embedding/user/part_0");
  rows->set_ids(Ids({42, 1ull << 63, 42}));
  return pull;
}

PushRequest PushStep(int64_t closure, int64_t step) {
  PushRequest push;
  push.set_job("fuzz");
  NamedTensor* g = push.add_gradients();
  g->set_name("dense_0/kernel");
  *g->mutable_tensor() = Floats({4, 3}, 0.5f);
  g = push.add_gradients();
  g->set_name("dense_0/bias");
  *g->mutable_tensor() = Floats({3}, -1.0f);
  SparseGradient* s = push.add_sparse();
  s->set_name("embedding/cat");
  s->set_ids(Ids({1, 5}));
  *s->mutable_rows() = Floats({2, 2}, 0.25f);
  s = push.add_sparse();
  s->set_name("embedding/user/part_0");
  s->set_ids(Ids({42, 7, 9, 11, 13}));  // past max_rows 4: evicts
  *s->mutable_rows() = Floats({5, 2}, 1.0f);
  push.mutable_update()->set_closure_id(closure);
  push.mutable_update()->set_step(step);
  return push;
}

bool WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  return static_cast<bool>(out);
}

int Main(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  std::string in;

  AppendRecord(PsOp::kPull, PullAll(), &in);
  files.push_back({"pull_and_lookup", in});

  in.clear();
  AppendRecord(PsOp::kPush, PushStep(1, 0), &in);
  AppendRecord(PsOp::kPush, PushStep(1, 1), &in);
  AppendRecord(PsOp::kPull, PullAll(), &in);
  files.push_back({"push_keyed_then_pull", in});

  in.clear();
  PushRequest fused = PushStep(2, 0);
  fused.clear_update();
  *fused.mutable_pull() = PullAll();
  AppendRecord(PsOp::kPush, fused, &in);
  files.push_back({"push_with_fused_pull", in});

  in.clear();
  PushRequest bad = PushStep(3, 0);
  *bad.mutable_gradients(1)->mutable_tensor() = Floats({4}, 1.0f);  // wrong shape
  AppendRecord(PsOp::kPush, bad, &in);
  PullRequest out_of_range = PullAll();
  out_of_range.mutable_lookups(0)->set_ids(Ids({8}));  // embedding/cat has rows 0..7
  AppendRecord(PsOp::kPull, out_of_range, &in);
  files.push_back({"bad_push_and_pull", in});

  in.clear();
  CreateVariablesRequest create;
  create.set_job("fuzz");
  VariableSpecProto* v = create.add_variables();
  v->set_name("dense_1/kernel/part_1");
  v->set_dtype(DT_FLOAT32);
  v->add_shape(2);
  v->add_shape(2);
  v->add_full_shape(4);
  v->add_full_shape(2);
  v->set_row_offset(2);
  v->mutable_initializer()->set_type("constant");
  v->mutable_initializer()->set_value(0.5f);
  v->mutable_optimizer()->set_type("sgd");
  v->mutable_optimizer()->set_learning_rate(0.1f);
  v = create.add_variables();
  v->set_name("embedding/item/part_0");
  v->set_dtype(DT_FLOAT32);
  v->set_kind(HASH_TABLE);
  v->add_shape(3);
  v->set_max_rows(2);
  v->set_eviction(AGE);
  v->mutable_initializer()->set_type("ones");
  v->mutable_optimizer()->set_type("momentum");
  v->mutable_optimizer()->set_learning_rate(0.1f);
  v->mutable_optimizer()->set_momentum(0.9f);
  AppendRecord(PsOp::kCreateVariables, create, &in);
  PullRequest pull_new;
  pull_new.set_job("fuzz");
  pull_new.add_names("dense_1/kernel/part_1");
  RowIds* rows = pull_new.add_lookups();
  rows->set_name("embedding/item/part_0");
  rows->set_ids(Ids({1, 2, 3}));
  AppendRecord(PsOp::kPull, pull_new, &in);
  files.push_back({"create_then_pull", in});

  in.clear();
  AppendRecord(PsOp::kPush, PushStep(4, 0), &in);
  AppendRecord(PsOp::kPush, PushStep(5, 0), &in);
  PruneKeysRequest prune;
  prune.set_job("fuzz");
  prune.set_below_closure_id(5);
  AppendRecord(PsOp::kPruneKeys, prune, &in);
  AppendRecord(PsOp::kPush, PushStep(4, 1), &in);  // retired: a duplicate
  files.push_back({"prune_keys", in});

  for (const auto& [name, bytes] : files) {
    const std::string path = dir + "/" + name;
    if (!WriteFile(path, bytes)) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
  }
  return 0;
}

}  // namespace
}  // namespace pscluster

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  return pscluster::Main(argv[1]);
}
