#!/usr/bin/env python3
"""Draws the loss curve of a training run from its --log-json file: an SVG
to look at and a CSV for other tools.

    python3 scripts/loss_curve.py LOG.jsonl --svg loss.svg --csv loss.csv [--entropy X]

The log has one JSON object per step (step, loss, lr, grad_norm,
tokens_per_s, and val_loss on the steps that evaluated). --entropy draws a
dashed line at that loss (the corpus's unigram entropy, say)."""
import argparse
import csv
import json
import sys

FIELDS = ["step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s"]


def read_log(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit("loss_curve.py: error: %s:%d: %s" % (path, n, e))
    if not rows:
        sys.exit("loss_curve.py: error: %s: no steps logged" % path)
    return rows


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for r in rows:
            w.writerow(["" if r.get(k) is None else r.get(k) for k in FIELDS])


def polyline(points, sx, sy):
    return " ".join("%.1f,%.1f" % (sx(x), sy(y)) for x, y in points)


def write_svg(rows, path, entropy):
    W, H, L, R, T, B = 720, 400, 60, 20, 30, 45
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    ys = [y for _, y in train + val] + ([entropy] if entropy else [])
    x0, x1 = min(s for s, _ in train), max(s for s, _ in train)
    y0, y1 = 0.0, max(ys) * 1.05
    x1 = x1 if x1 > x0 else x0 + 1
    sx = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    sy = lambda y: T + (1 - (y - y0) / (y1 - y0)) * (H - T - B)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14">loss per step (nats per token)</text>' % L]
    for i in range(6):  # horizontal grid with labels
        y = y0 + (y1 - y0) * i / 5
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, sy(y), sy(y)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (L - 6, sy(y) + 4, y))
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (sx(x), H - B + 16, x))
    out.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % ((L + W - R) // 2, H - 8))
    if entropy:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="6 4"/>'
                   % (L, W - R, sy(entropy), sy(entropy)))
        out.append('<text x="%d" y="%.1f" text-anchor="end" fill="#666">unigram entropy %.3f</text>'
                   % (W - R - 4, sy(entropy) - 5, entropy))
    out.append('<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="%s"/>'
               % polyline(train, sx, sy))
    for x, y in val:
        out.append('<circle cx="%.1f" cy="%.1f" r="4" fill="#d62728"/>' % (sx(x), sy(y)))
    out.append('<text x="%d" y="%d" fill="#1f77b4">train</text>' % (W - R - 120, T + 14))
    out.append('<text x="%d" y="%d" fill="#d62728">validation</text>' % (W - R - 70, T + 14))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    ap.add_argument("--svg")
    ap.add_argument("--csv")
    ap.add_argument("--entropy", type=float)
    a = ap.parse_args()
    rows = read_log(a.log)
    if a.csv:
        write_csv(rows, a.csv)
    if a.svg:
        write_svg(rows, a.svg, a.entropy)


if __name__ == "__main__":
    main()
