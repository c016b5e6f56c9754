#include "rpc/peer_role.h"

#include <gtest/gtest.h>

namespace pscluster {
namespace {

TEST(PeerRoleTest, RoleIsTheSubjectsOu) {
  EXPECT_EQ(RoleOfSubject("CN=worker-0,OU=worker,O=pscluster"), "worker");
  EXPECT_EQ(RoleOfSubject("OU=coordinator"), "coordinator");
  EXPECT_EQ(RoleOfSubject("CN=a\\,OU=coordinator,OU=ps"), "ps");  // an escaped comma
  EXPECT_EQ(RoleOfSubject("CN=x+OU=ps"), "ps");                    // a multi-valued RDN
  EXPECT_EQ(RoleOfSubject("ou = worker , CN=w"), "worker");
  EXPECT_EQ(RoleOfSubject("CN=cluster"), std::nullopt);
  EXPECT_EQ(RoleOfSubject(""), std::nullopt);
}

}  // namespace
}  // namespace pscluster
