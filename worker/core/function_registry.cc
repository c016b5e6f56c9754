#include "worker/core/function_registry.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace pscluster {

absl::Status FunctionRegistry::Register(const std::string& name, Function function) {
  if (name.empty()) return absl::InvalidArgumentError("a function needs a name");
  if (!function) {
    return absl::InvalidArgumentError(absl::StrCat("function '", name, "' is empty"));
  }
  absl::MutexLock lock(&mu_);
  if (!functions_.emplace(name, std::move(function)).second) {
    return absl::AlreadyExistsError(absl::StrCat("function '", name, "' is registered twice"));
  }
  return absl::OkStatus();
}

absl::Status FunctionRegistry::Check(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  if (functions_.count(name) != 0) return absl::OkStatus();
  std::vector<std::string> names;
  for (const auto& [n, f] : functions_) names.push_back(n);
  return absl::NotFoundError(absl::StrCat(
      "no function '", name, "' is registered on this worker (it has: ",
      names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
}

FunctionOutcome FunctionRegistry::Run(const std::string& name, const std::string& args,
                                      FunctionContext* context) {
  Function function;
  {
    absl::MutexLock lock(&mu_);
    auto it = functions_.find(name);
    if (it != functions_.end()) function = it->second;
  }
  FunctionOutcome outcome;
  FunctionError error;
  if (!function) {
    error.set_type("NOT_FOUND");
    error.set_message(absl::StrCat("no function '", name, "' is registered"));
    outcome.error = error;
    return outcome;
  }
  try {
    absl::StatusOr<std::string> result = function(*context, args);
    if (result.ok()) {
      outcome.result = *std::move(result);
      return outcome;
    }
    error.set_type(absl::StatusCodeToString(result.status().code()));
    error.set_message(std::string(result.status().message()));
  } catch (const std::exception& e) {
    error.set_type("std::exception");
    error.set_message(e.what());
  } catch (...) {
    error.set_type("unknown exception");
    error.set_message("the function threw something that is not a std::exception");
  }
  error.set_traceback(absl::StrCat("in function '", name, "', closure ", context->closure_id()));
  outcome.error = std::move(error);
  return outcome;
}

}  // namespace pscluster
