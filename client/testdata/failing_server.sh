#!/bin/sh
# Stands in for a server that cannot start (local_cluster_test).
echo "fatal: cannot bind: address already in use" >&2
exit 3
