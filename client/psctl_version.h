// psctl's version, printed by `psctl --version`. The one place it is defined.
#ifndef PSCLUSTER_CLIENT_PSCTL_VERSION_H_
#define PSCLUSTER_CLIENT_PSCTL_VERSION_H_

namespace pscluster {

inline constexpr char kPsctlVersion[] = "0.9.0";

}  // namespace pscluster

#endif  // PSCLUSTER_CLIENT_PSCTL_VERSION_H_
