#!/usr/bin/env bash
# psctl's command line, run as a user would: help and version exit 0, usage
# errors exit 2, an unreachable coordinator exits 3 (from --coordinator and
# from PSCTL_COORDINATOR), and a malformed job YAML exits 2 naming the spot.
# No server is started: 127.0.0.1:1 refuses connections.
#
# usage: psctl_cli_test.sh PSCTL
set -euo pipefail
source "$(dirname "$0")/testlib.sh"

PSCTL="$(abs "$1")"
TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/psctl_cli.XXXXXX")"
unset PSCTL_COORDINATOR
UNREACHABLE=127.0.0.1:1

# expect CODE NAME ARGS...: runs psctl ARGS (bounded by timeout) and checks
# its exit code; stdout and stderr are left in $TMP/NAME.{out,err}.
expect() {
  local want="$1" name="$2" rc=0
  shift 2
  timeout 30 "$PSCTL" "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" || rc=$?
  if ((rc != want)); then
    echo "--- stdout:" >&2; cat "$TMP/$name.out" >&2
    echo "--- stderr:" >&2; cat "$TMP/$name.err" >&2
    fail "$name: psctl $* exited $rc, want $want"
  fi
  echo "OK: $name: psctl $* -> $rc"
}

# Help: global and per command, long and short.
expect 0 help --help
expect 0 help_short -h
grep -q "Exit codes" "$TMP/help.out" || fail "--help does not document the exit codes"
grep -q "PSCTL_COORDINATOR" "$TMP/help.out" || fail "--help does not mention PSCTL_COORDINATOR"
for cmd in local submit status watch cancel list describe logs checkpoint predict; do
  expect 0 "help_$cmd" "$cmd" --help
  grep -q "Usage: psctl $cmd" "$TMP/help_$cmd.out" || fail "$cmd --help is not $cmd's help"
done
expect 0 help_verify checkpoint verify -h
grep -q -- "--keep_run_dir" "$TMP/help_local.out" || fail "local --help lacks --keep_run_dir"
grep -q -- "--output" "$TMP/help_status.out" || fail "status --help lacks --output"

expect 0 version --version
grep -Eq '^psctl [0-9]+\.[0-9]+\.[0-9]+$' "$TMP/version.out" || fail "bad --version: $(cat "$TMP/version.out")"

# Usage errors.
expect 2 unknown frobnicate
grep -q "unknown command 'frobnicate'" "$TMP/unknown.err" || fail "unknown command not named"
expect 2 no_command
expect 2 bad_flag list --no_such_flag --coordinator "$UNREACHABLE"
expect 2 bad_output list -o xml --coordinator "$UNREACHABLE"
expect 2 no_coordinator list
expect 2 missing_job_id watch --coordinator "$UNREACHABLE"

# An unreachable coordinator: exit 3, from the flag and from the environment.
expect 3 unreachable_status status some-job --coordinator "$UNREACHABLE"
expect 3 unreachable_list list -o json --coordinator "$UNREACHABLE"
expect 3 unreachable_logs logs some-job --coordinator="$UNREACHABLE"
expect 3 unreachable_cancel cancel some-job --coordinator "$UNREACHABLE"
[[ ! -s "$TMP/unreachable_list.out" ]] || fail "an unreachable coordinator printed on stdout"
PSCTL_COORDINATOR="$UNREACHABLE" expect 3 env_list list
PSCTL_COORDINATOR="$UNREACHABLE" expect 3 env_watch watch some-job -o yaml
# The flag wins over the environment (and the address is really used: an
# unresolvable one fails differently from 127.0.0.1:1, but still with 3).
PSCTL_COORDINATOR=no-such-host.invalid:1 expect 3 flag_wins status --coordinator "$UNREACHABLE"
grep -q "127.0.0.1:1" "$TMP/flag_wins.err" || fail "--coordinator did not override PSCTL_COORDINATOR"

# A malformed job YAML: exit 2 with file:line:col, for local and for submit
# (validated before any connection).
printf 'name: broken\nmodel: [unclosed\n' > "$TMP/bad.yaml"
expect 2 bad_yaml_local local "$TMP/bad.yaml" --ps 1 --workers 1
grep -q "bad.yaml:[0-9]*:[0-9]*" "$TMP/bad_yaml_local.err" || fail "no file:line:col for bad YAML"
[[ ! -s "$TMP/bad_yaml_local.out" ]] || fail "bad YAML printed on stdout"
expect 2 bad_yaml_submit submit "$TMP/bad.yaml" --coordinator "$UNREACHABLE"
expect 2 missing_yaml local "$TMP/no-such.yaml"

echo PASS
