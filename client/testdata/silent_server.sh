#!/bin/sh
# Stands in for a server that hangs before serving (local_cluster_test).
exec sleep 60
