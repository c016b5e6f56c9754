#!/usr/bin/env python3
"""Sums the test cases of a `bazel test` run: "N passed, N failed, N skipped".

Reads every test target's test.xml (JUnit XML, written by gtest or generated
by Bazel for sh_test) under bazel-testlogs:
  - a <testcase> with a <failure> or <error> child counts as failed,
  - one with result="skipped"/"suppressed" or a <skipped> child as skipped,
  - every other <testcase> as passed.
A target whose test.xml is missing or unparsable counts as 1 failed, and so
does a target Bazel reports as failed although its test.xml shows no failing
case (e.g. it crashed after the cases ran, or timed out).

Which targets and which test.xml files: the Build Event Protocol file of the
run (--bep, from `bazel test --build_event_json_file=F`) names the test.xml of
every test that ran and the status of each target; --targets lists the test
targets that should have run (so one that failed to build counts as failed).
Without --bep, all test.xml files under --testlogs are read.

--extra_xml FILE (repeatable) adds the cases of JUnit files written outside
Bazel (fuzz/fuzz_smoke.sh: one case per fuzz target); a missing or unparsable
one counts as 1 failed.

Prints one line per failing target, then the totals as the last line. Exits 1
if any case failed or --bazel_exit_code is non-zero, else 0.
"""

import argparse
import glob
import json
import os
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET


def count_cases(xml_path):
    """Returns (passed, failed, skipped) for one test.xml; raises on bad XML."""
    root = ET.parse(xml_path).getroot()
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif (case.get("result") in ("skipped", "suppressed") or case.get("status") == "notrun"
              or case.find("skipped") is not None):
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def label_dir(label):
    """//a/b:c -> a/b/c (the target's directory under bazel-testlogs)."""
    label = label.lstrip("@")
    if label.startswith("//"):
        label = label[2:]
    package, _, name = label.partition(":")
    if not name:
        name = package.rsplit("/", 1)[-1]
    return os.path.join(package, name)


def uri_to_path(uri):
    if uri.startswith("file://"):
        return urllib.request.url2pathname(urllib.parse.urlparse(uri).path)
    return uri


def read_bep(path):
    """Returns ({label: [test.xml paths]}, {label: overall status})."""
    xmls, status = {}, {}
    attempts = {}  # (label, run, shard) -> (attempt, xml path)
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            eid = event.get("id", {})
            if "testResult" in eid and "testResult" in event:
                key = eid["testResult"]
                label = key.get("label", "")
                xml = None
                for out in event["testResult"].get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        xml = uri_to_path(out.get("uri", ""))
                slot = (label, key.get("run", 1), key.get("shard", 1))
                attempt = key.get("attempt", 1)
                if slot not in attempts or attempt >= attempts[slot][0]:
                    attempts[slot] = (attempt, xml)
            elif "testSummary" in eid and "testSummary" in event:
                status[eid["testSummary"].get("label", "")] = (
                    event["testSummary"].get("overallStatus", "NO_STATUS"))
            elif "targetCompleted" in eid and "aborted" in event:
                status.setdefault(eid["targetCompleted"].get("label", ""), "FAILED_TO_BUILD")
    for (label, _, _), (_, xml) in attempts.items():
        xmls.setdefault(label, []).append(xml)
    return xmls, status


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testlogs", required=True, help="`bazel info bazel-testlogs`")
    parser.add_argument("--targets", help="file with the expected test target labels")
    parser.add_argument("--bep", help="Build Event Protocol JSON file of the run")
    parser.add_argument("--bazel_exit_code", type=int, default=0)
    parser.add_argument("--extra_xml", action="append", default=[],
                        help="JUnit XML written outside Bazel (e.g. by fuzz/fuzz_smoke.sh)")
    args = parser.parse_args()

    expected = []
    if args.targets and os.path.exists(args.targets):
        with open(args.targets) as f:
            expected = [l.strip() for l in f if l.strip().startswith(("//", "@"))]

    if args.bep and os.path.exists(args.bep):
        xmls, status = read_bep(args.bep)
        # Targets that were expected but never produced a result failed to
        # build or run; targets only the BEP knows still count.
        labels = sorted(set(expected) | set(xmls) | {l for l in status if l in expected})
    else:
        xmls, status = {}, {}
        labels = sorted(set(expected))
        if not labels:  # no target list: every test.xml under testlogs
            for xml in glob.glob(os.path.join(args.testlogs, "**", "test.xml"), recursive=True):
                rel = os.path.relpath(os.path.dirname(xml), args.testlogs)
                if os.path.basename(rel).startswith("shard_"):
                    rel = os.path.dirname(rel)
                label = "//%s:%s" % os.path.split(rel)
                xmls.setdefault(label, []).append(xml)
            labels = sorted(xmls)
        else:
            for label in labels:
                d = os.path.join(args.testlogs, label_dir(label))
                found = glob.glob(os.path.join(d, "test.xml")) or glob.glob(
                    os.path.join(d, "shard_*", "test.xml"))
                if found:
                    xmls[label] = found

    passed = failed = skipped = 0
    for label in labels:
        paths = [p for p in xmls.get(label, []) if p]
        target_failed = 0
        problem = None
        if not paths:
            target_failed, problem = 1, "no test.xml (%s)" % status.get(label, "did not run")
        for path in paths:
            try:
                p, f, s = count_cases(path)
            except (OSError, ET.ParseError) as e:
                target_failed += 1
                problem = "unreadable test.xml %s: %s" % (path, e)
                continue
            passed, skipped, target_failed = passed + p, skipped + s, target_failed + f
        if target_failed == 0 and status.get(label, "PASSED") not in ("PASSED", "FLAKY"):
            target_failed, problem = 1, status[label]
        failed += target_failed
        if target_failed:
            print("FAILED %s: %s" % (label, problem or "%d failing case(s)" % target_failed))

    for path in args.extra_xml:
        try:
            p, f, s = count_cases(path)
        except (OSError, ET.ParseError) as e:
            p, f, s = 0, 1, 0
            print("FAILED %s: unreadable: %s" % (path, e))
        else:
            if f:
                print("FAILED %s: %d failing case(s)" % (path, f))
        passed, failed, skipped = passed + p, failed + f, skipped + s

    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed > 0 or args.bazel_exit_code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
