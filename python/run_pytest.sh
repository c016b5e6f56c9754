#!/usr/bin/env bash
# Runs python/tests/ with pytest on the runfiles copy of the package and its
# extension (which finds the server binaries next to it: ../ps/ps_server,
# ...), writing JUnit XML where Bazel counts the test cases.
set -euo pipefail
root="${TEST_SRCDIR:?}/${TEST_WORKSPACE:-pscluster}"
export PYTHONPATH="$root/python"
export PYTHONDONTWRITEBYTECODE=1
cd "${TEST_TMPDIR:?}"
# Debian's python3 (python3-pytest); the bound keeps a hang from outliving
# Bazel's own timeout without a report.
exec timeout -k 10 280 /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  --junitxml="${XML_OUTPUT_FILE:-$TEST_TMPDIR/pytest.xml}" "$root/python/tests"
