#!/usr/bin/python3
"""Compares a training run of ours with the PyTorch oracle's run of the same
model, weights and data:

    compare.py --log-json OURS.jsonl --dump-grads OURS_GRADS.safetensors
               --oracle RESULT.json --oracle-grads GRADS.safetensors
               [--first-rtol 1e-5] [--grad-rtol 1e-4] [--loss-rtol 1e-4]

Checks: the first loss within --first-rtol (relative), every parameter's
gradient within --grad-rtol as |ours - oracle| / |oracle| (Frobenius
norms), the loss of every step within --loss-rtol, the gradient norm of
every step (before clipping) within --norm-rtol and its learning rate
within --lr-rtol (both sides compute the schedule in double). Prints a
table of all the numbers and exits 1 when a check fails or an input is
unusable.

OURS.jsonl is the runtime's --log-json file: one JSON object per line; the
records with a numeric `loss` and a `step` are the training steps (others,
e.g. validation records, are ignored), taken in step order. Either side's
gradients may be f32 or f64; they are compared in f64.
"""
import argparse
import json
import math
import os
import sys

# No __pycache__ beside the sources: the tree stays as checked out.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import safetensors  # noqa: E402


class CompareError(Exception):
    pass


def our_records(path):
    """The per-step records of our --log-json file, in step order."""
    steps = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise CompareError("%s:%d: not JSON: %s" % (path, n, e))
            if not isinstance(rec, dict) or "step" not in rec:
                continue
            loss = rec.get("loss")
            if isinstance(loss, (int, float)) and not isinstance(loss, bool):
                steps.setdefault(int(rec["step"]), rec)
    if not steps:
        raise CompareError("%s: no record with `step` and `loss`" % path)
    return [steps[k] for k in sorted(steps)]


def number(rec, key):
    """rec[key] as a float, NaN when absent (which fails every check)."""
    v = rec.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def rel(a, b):
    """|a - b| / |b|; 0 when both are 0, inf when only b is."""
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def compare_steps(ours, oracle, args):
    """Loss, gradient norm and learning rate of every step: one row each."""
    ok = True
    print("%-4s %15s %15s %9s  %12s %12s %9s  %11s %9s %s"
          % ("step", "loss ours", "loss oracle", "rel", "norm ours", "norm oracle", "rel",
             "lr", "rel", ""))
    if len(ours) != len(oracle):
        print("step counts differ: ours %d, oracle %d" % (len(ours), len(oracle)))
        ok = False
    for i, (a, b) in enumerate(zip(ours, oracle)):
        checks = []
        for key, tol in (("loss", args.first_rtol if i == 0 else args.loss_rtol),
                         ("grad_norm", args.norm_rtol), ("lr", args.lr_rtol)):
            x, y = number(a, key), number(b, key)
            r = rel(x, y) if math.isfinite(x) else math.inf
            checks.append((key, x, y, r, tol))
        bad = ["%s > %g" % (k, tol) for k, _, _, r, tol in checks if not r <= tol]
        ok &= not bad
        (_, l1, l2, lr_, _), (_, n1, n2, nr, _), (_, r1, _, rr, _) = checks
        print("%-4d %15.9f %15.9f %9.2e  %12.7f %12.7f %9.2e  %11.4e %9.2e %s"
              % (i, l1, l2, lr_, n1, n2, nr, r1, rr, "FAIL (%s)" % ", ".join(bad) if bad else ""))
    return ok


def compare_grads(ours, oracle, args):
    ok = True
    worst, worst_name = 0.0, ""
    names = sorted(set(ours) | set(oracle))
    width = max(len(n) for n in names) if names else 10
    print("\n%-*s %12s %12s %10s %s" % (width, "gradient", "|oracle|", "|ours-oracle|", "rel", ""))
    for n in names:
        if n not in ours or n not in oracle:
            print("%-*s missing in %s  FAIL" % (width, n, "ours" if n not in ours else "oracle"))
            ok = False
            continue
        a, b = np.asarray(ours[n], np.float64), np.asarray(oracle[n], np.float64)
        if a.shape != b.shape:
            print("%-*s shape %s vs oracle %s  FAIL" % (width, n, list(a.shape), list(b.shape)))
            ok = False
            continue
        nb, nd = float(np.linalg.norm(b)), float(np.linalg.norm(a - b))
        r = 0.0 if nd == 0 else (nd / nb if nb > 0 else math.inf)
        if not np.all(np.isfinite(a)):
            r = math.inf
        good = r <= args.grad_rtol
        ok &= good
        if r >= worst:
            worst, worst_name = r, n
        print("%-*s %12.5e %12.5e %10.2e %s"
              % (width, n, nb, nd, r, "" if good else "FAIL (> %g)" % args.grad_rtol))
    print("worst gradient: %s rel %.2e" % (worst_name, worst))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log-json", required=True, help="our --log-json file")
    ap.add_argument("--dump-grads", help="our --dump-grads safetensors")
    ap.add_argument("--oracle", required=True, help="oracle.py's RESULT.json")
    ap.add_argument("--oracle-grads", help="oracle.py's --grads safetensors")
    ap.add_argument("--first-rtol", type=float, default=1e-5)
    ap.add_argument("--grad-rtol", type=float, default=1e-4)
    ap.add_argument("--loss-rtol", type=float, default=1e-4)
    ap.add_argument("--norm-rtol", type=float, default=1e-4)
    ap.add_argument("--lr-rtol", type=float, default=1e-12)
    args = ap.parse_args()
    if bool(args.dump_grads) != bool(args.oracle_grads):
        ap.error("--dump-grads and --oracle-grads go together")
    try:
        ours = our_records(args.log_json)
        with open(args.oracle) as f:
            oracle = json.load(f)["log"]
        ok = compare_steps(ours, oracle, args)
        if args.dump_grads:
            ok &= compare_grads(safetensors.read(args.dump_grads),
                                safetensors.read(args.oracle_grads), args)
    except (OSError, ValueError, KeyError, TypeError, CompareError,
            safetensors.SafetensorsError) as e:
        print("compare.py: error: %s" % e, file=sys.stderr)
        sys.exit(1)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
