#include "common/job_spec_parse.h"

#include <set>

#include "absl/strings/str_join.h"

namespace pscluster {
namespace job_spec_internal {

[[noreturn]] void Fail(const YAML::Node& node, std::string message) {
  throw SpecError{node.Mark(), std::move(message)};
}

std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "empty";
    default:
      return absl::StrCat("'", n.Scalar(), "'");
  }
}

void ExpectMap(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) Fail(node, absl::StrCat(where, " must be a mapping, got ", Describe(node)));
}

void CheckKeys(const YAML::Node& node, const std::string& where,
               const std::vector<std::string>& allowed) {
  ExpectMap(node, where);
  std::set<std::string> ok(allowed.begin(), allowed.end());
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!ok.count(key)) {
      Fail(kv.first, absl::StrCat("unknown key '", key, "' in ", where,
                                  " (expected one of: ", absl::StrJoin(allowed, ", "), ")"));
    }
  }
}

std::string Str(const YAML::Node& n, const std::string& what) {
  return Scalar<std::string>(n, what, "a string");
}
double Num(const YAML::Node& n, const std::string& what) {
  return Scalar<double>(n, what, "a number");
}
bool Bool(const YAML::Node& n, const std::string& what) {
  return Scalar<bool>(n, what, "true or false");
}
int64_t Int(const YAML::Node& n, const std::string& what, int64_t min_value, int64_t max_value) {
  const int64_t v = Scalar<int64_t>(n, what, "an integer");
  if (v < min_value) Fail(n, absl::StrCat(what, " must be >= ", min_value, ", got ", v));
  if (v > max_value) {
    Fail(n, absl::StrCat(what, " must be <= ", max_value, " (the stated limit), got ", v));
  }
  return v;
}
float Positive(const YAML::Node& n, const std::string& what) {
  const double v = Num(n, what);
  if (!(v > 0)) Fail(n, absl::StrCat(what, " must be > 0, got ", v));
  return static_cast<float>(v);
}

YAML::Node Required(const YAML::Node& parent, const std::string& key, const std::string& where) {
  YAML::Node n = parent[key];
  if (!n) Fail(parent, absl::StrCat(where, " is missing required key '", key, "'"));
  return n;
}

}  // namespace job_spec_internal
}  // namespace pscluster
