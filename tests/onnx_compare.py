"""Runs an exported ONNX model with onnxruntime on the inputs checkpoint_predict
fed pscluster's own Model, and compares the outputs (onnx_export_test.sh,
onnx_export_ctr_test.sh).

usage: onnx_compare.py MODEL REF_PREFIX NAME [--min_classes K] [--min_spread S]

REF_PREFIX is checkpoint_predict's OUT_PREFIX: REF_PREFIX.json says how many
rows, dense inputs and which id inputs; REF_PREFIX.inputs holds the dense
rows ("input"), REF_PREFIX.ids.<f> feature f's int64 ids padded with -1
("ids/<feature>"), REF_PREFIX.logits and .predictions pscluster's outputs.
Fails (exit 1) unless logits and predictions agree within 1e-5, and, so that
a model predicting the same for everything cannot pass, unless argmax takes
at least K classes (softmax models) or the logits' standard deviation is at
least S. Prints one line: NAME, rows, the largest differences.
"""
import argparse
import json
import sys

import numpy as np
import onnxruntime as ort


def feeds_of(sess, ref):
    info = json.load(open(ref + ".json"))
    rows = info["rows"]
    names = {i.name for i in sess.get_inputs()}
    feeds = {}
    if "input" in names:
        feeds["input"] = np.fromfile(ref + ".inputs", dtype=np.float32).reshape(
            rows, info["inputs"])
    for f, feature in enumerate(info["features"]):
        feeds[feature["input"]] = np.fromfile(ref + ".ids.%d" % f, dtype=np.int64).reshape(
            rows, feature["width"])
    missing = names - set(feeds)
    extra = set(feeds) - names
    assert not missing and not extra, "graph inputs %s, fed %s" % (sorted(names), sorted(feeds))
    return info, feeds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("ref")
    parser.add_argument("name")
    parser.add_argument("--min_classes", type=int, default=0)
    parser.add_argument("--min_spread", type=float, default=0.0)
    args = parser.parse_args()

    sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    info, feeds = feeds_of(sess, args.ref)
    logits, predictions = sess.run(["logits", "predictions"], feeds)
    want_logits = np.fromfile(args.ref + ".logits", dtype=np.float32).reshape(logits.shape)
    want_pred = np.fromfile(args.ref + ".predictions", dtype=np.float32).reshape(
        predictions.shape)
    assert logits.shape[0] == info["rows"], logits.shape
    d_logits = float(np.max(np.abs(logits - want_logits)))
    d_pred = float(np.max(np.abs(predictions - want_pred)))
    classes = len(set(np.argmax(want_logits, axis=1).tolist()))
    spread = float(np.std(want_logits))
    print("%s: %d rows, max |logits diff| %.2e, max |predictions diff| %.2e, %s"
          % (args.name, logits.shape[0], d_logits, d_pred,
             "%d classes predicted" % classes if logits.shape[1] > 1
             else "logits std %.3f" % spread))
    ok = True
    if not (d_logits <= 1e-5 and d_pred <= 1e-5):
        print("%s: onnxruntime differs from pscluster" % args.name, file=sys.stderr)
        ok = False
    if logits.shape[1] > 1 and classes < args.min_classes:
        print("%s: the model predicts only %d classes" % (args.name, classes), file=sys.stderr)
        ok = False
    if spread < args.min_spread:
        print("%s: the logits hardly vary (std %.4f)" % (args.name, spread), file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
