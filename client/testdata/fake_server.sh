#!/bin/sh
# Stands in for ps_server/worker_server/coordinator in local_cluster_test:
# prints its arguments (to its log), writes a port file like the real servers
# (atomically, "PORT\n"): the port of --address, or a made-up one for port 0,
# and serves nothing until it is stopped.
port_file=""
port=0
for arg in "$@"; do
  case "$arg" in
    --port_file=*) port_file="${arg#--port_file=}" ;;
    --address=*) port="${arg##*:}" ;;
  esac
done
echo "args: $*"
[ "$port" = 0 ] && port=$(( $$ % 50000 + 10000 ))
echo "$port" > "$port_file.tmp" && mv "$port_file.tmp" "$port_file"
exec sleep 60
