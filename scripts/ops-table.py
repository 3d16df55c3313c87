#!/usr/bin/env python3
"""Writes the op table of docs/language.md from ir/ops.def, so the manual
lists exactly the ops the compiler knows.

  scripts/ops-table.py            print the Markdown table
  scripts/ops-table.py --update   rewrite the table in docs/language.md
  scripts/ops-table.py --check    exit 1 when docs/language.md is out of date

The table sits between the lines <!-- ops:begin --> and <!-- ops:end -->."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS_DEF = os.path.join(ROOT, "ir", "ops.def")
DOC = os.path.join(ROOT, "docs", "language.md")
BEGIN, END = "<!-- ops:begin -->", "<!-- ops:end -->"

# The arguments of OP(...) in ir/ops.def, in order (its header comment says
# what each holds); the script stops when an entry has other columns.
COLUMNS = ["id", "name", "min_in", "max_in", "nout", "shape", "attrs", "flags", "adjoint",
           "tp", "rows", "flops", "doc"]

FLAG_WORDS = {
    "IR_OPF_ELEMENTWISE": "elementwise",
    "IR_OPF_GEMM": "matrix multiply",
    "IR_OPF_REGION": "region",
    "IR_OPF_SOURCE": "no tensor inputs",
    "IR_OPF_MULTI_OUT": "n outputs",
    "IR_OPF_RANDOM": "random",
    "IR_OPF_INTERNAL": "internal",
    "IR_OPF_PARALLEL": "tensor parallel",
    "IR_OPF_COLLECTIVE": "collective",
    "IR_OPF_ACCUMULATES": "accumulates",
}


def c_string(text):
    """Joins adjacent C string literals ("a" "b") into one Python string."""
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', text))


def split_args(body):
    """Splits the OP(...) arguments at top-level commas, keeping strings whole."""
    args, depth, cur, in_str, i = [], 0, "", False, 0
    while i < len(body):
        ch = body[i]
        if in_str:
            cur += ch
            if ch == "\\":
                cur += body[i + 1]
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str, cur = True, cur + ch
        elif ch in "([":
            depth, cur = depth + 1, cur + ch
        elif ch in ")]":
            depth, cur = depth - 1, cur + ch
        elif ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    args.append(cur.strip())
    return args


def read_ops():
    text = open(OPS_DEF).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    ops = []
    for m in re.finditer(r"^OP\((.*?)\)\s*$", text, flags=re.S | re.M):
        # The manual shows name, arity, attributes, flags and the description;
        # adjoint, tp, rows and flops are the passes' business.
        args = split_args(m.group(1))
        if len(args) != len(COLUMNS) or not args[-1].startswith('"'):
            sys.exit(f"ops-table: cannot read OP({m.group(1)[:40]}...): it should have the "
                     f"{len(COLUMNS)} columns {', '.join(COLUMNS)}")
        a = dict(zip(COLUMNS, args))
        flags = [FLAG_WORDS.get(f.strip(), f.strip()) for f in a["flags"].split("|")
                 if f.strip() != "0"]
        ops.append(dict(name=c_string(a["name"]), min_in=int(a["min_in"]),
                        max_in=int(a["max_in"]), nout=int(a["nout"]),
                        attrs=c_string(a["attrs"]).split(), flags=flags, doc=c_string(a["doc"])))
    return ops


def inputs(op):
    lo, hi = op["min_in"], op["max_in"]
    if hi < 0:
        return f"{lo} or more"
    return str(lo) if lo == hi else f"{lo} to {hi}"


def attrs(op):
    out = []
    for a in op["attrs"]:
        # `?name=default`: a quiet attribute, printed only when set.
        name, _, dflt = a.lstrip("?").partition("=")
        out.append(f"`{name}` = {dflt}" if dflt else f"`{name}`")
    return ", ".join(out) or "none"


def table(ops):
    rows = ["| op | tensor inputs | attributes (default) | what it computes |",
            "| --- | --- | --- | --- |"]
    regions = [op for op in ops if "region" in op["flags"]]
    for op in ops:
        if op in regions:
            continue
        doc = op["doc"].replace("|", "\\|")
        if op["flags"]:
            doc += " *(" + ", ".join(op["flags"]) + ")*"
        rows.append(f"| `{op['name']}` | {inputs(op)} | {attrs(op)} | {doc} |")
    for op in regions:
        rows.append(f"\nThe IR op `{op['name']}` ({op['doc']}) is not called: the "
                    f"`{op['name']}` statement writes it.")
    return "\n".join(rows) + "\n"


def main():
    new = table(read_ops())
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("", "--update", "--check"):
        sys.exit(__doc__)
    if not mode:
        sys.stdout.write(new)
        return
    doc = open(DOC).read()
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        sys.exit(f"ops-table: {DOC} has no {BEGIN} ... {END} section")
    updated = doc[:start + len(BEGIN)] + "\n" + new + doc[end:]
    if mode == "--check":
        if updated != doc:
            sys.exit("ops-table: docs/language.md lists other ops than ir/ops.def; "
                     "run scripts/ops-table.py --update")
        print("ops-table: docs/language.md matches ir/ops.def")
        return
    if updated != doc:
        open(DOC, "w").write(updated)
    print("ops-table: docs/language.md up to date")


if __name__ == "__main__":
    main()
