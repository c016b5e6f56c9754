// Small status-propagation macros. Abseil 20220623 (Debian 12) ships no
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so pscluster keeps its own here.
#ifndef PSCLUSTER_COMMON_STATUS_MACROS_H_
#define PSCLUSTER_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PS_CONCAT_INNER_(a, b) a##b
#define PS_CONCAT_(a, b) PS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                                    \
  do {                                                           \
    const ::absl::Status ps_status_ = (expr);                    \
    if (!ps_status_.ok()) return ps_status_;                     \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, StatusOrExpr());` unwraps or returns the error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(PS_CONCAT_(ps_statusor_, __LINE__), lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // PSCLUSTER_COMMON_STATUS_MACROS_H_
