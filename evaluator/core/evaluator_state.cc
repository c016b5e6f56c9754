#include "evaluator/core/evaluator_state.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/checkpoint_file.h"

namespace pscluster {

std::string EvaluatorStatePath(const std::string& checkpoint_dir) {
  return checkpoint_dir + "/evaluator/state";
}

std::string FormatEvaluatorState(const EvaluatorState& s) {
  // %.17g: the double reads back bit for bit.
  return absl::StrFormat(
      "last_evaluated %d\nevaluations %d\nbest_checkpoint %d\nbest_value %.17g\nbest_step %d\n",
      s.last_evaluated, s.evaluations, s.best_checkpoint, s.best_value, s.best_step);
}

absl::StatusOr<EvaluatorState> LoadEvaluatorState(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return EvaluatorState();
    return absl::Status(
        absl::ErrnoToStatusCode(errno),
        absl::StrCat("cannot read the evaluator state ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  EvaluatorState s;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> kv = absl::StrSplit(line, ' ', absl::SkipEmpty());
    auto bad = [&](absl::string_view why) {
      return absl::DataLossError(
          absl::StrCat("evaluator state ", path, ":", line_number, ": ", why, " ('", line,
                       "'); delete the file to evaluate the newest checkpoint afresh"));
    };
    if (kv.size() != 2) return bad("expected 'key value'");
    const absl::string_view key = kv[0];
    bool ok = true;
    if (key == "last_evaluated") {
      ok = absl::SimpleAtoi(kv[1], &s.last_evaluated);
    } else if (key == "evaluations") {
      ok = absl::SimpleAtoi(kv[1], &s.evaluations);
    } else if (key == "best_checkpoint") {
      ok = absl::SimpleAtoi(kv[1], &s.best_checkpoint);
    } else if (key == "best_value") {
      ok = absl::SimpleAtod(kv[1], &s.best_value);
    } else if (key == "best_step") {
      ok = absl::SimpleAtoi(kv[1], &s.best_step);
    } else {
      return bad(absl::StrCat("unknown key '", key, "'"));
    }
    if (!ok) return bad(absl::StrCat("'", kv[1], "' is not a number"));
  }
  return s;
}

absl::Status SaveEvaluatorState(const std::string& path, const EvaluatorState& state) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) {
    return absl::Status(absl::ErrnoToStatusCode(ec.value()),
                        absl::StrCat("cannot create the directory of ", path, ": ", ec.message()));
  }
  return WriteFileAtomically(path, FormatEvaluatorState(state)).status();
}

}  // namespace pscluster
