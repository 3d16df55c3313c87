#!/usr/bin/env python3
"""Rebuilds data/corpus.txt from Debian's r-cran-janeaustenr package.

The package keeps each novel as an R character vector (one element per line
of the Project Gutenberg text) inside R's lazy-load database
(data/Rdata.rdx + data/Rdata.rdb). R is not needed to read it: the index is
a gzip'ed R serialization, each object a zlib chunk of the same format, and
this file carries the few cases of R's serialization format those use.

    apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb pkg
    python3 data/extract_austen.py pkg/usr/lib/R/site-library/janeaustenr > data/corpus.txt

Only needed to regenerate or audit the shipped corpus; the build uses
data/corpus.txt as it is.
"""
import gzip
import os
import struct
import sys
import zlib

# The novels that go into the corpus, in publication order. Mansfield Park
# and Emma are left out to keep the corpus under 3 MB.
NOVELS = [("sensesensibility", "Sense and Sensibility"),
          ("prideprejudice", "Pride and Prejudice"),
          ("northangerabbey", "Northanger Abbey"),
          ("persuasion", "Persuasion")]


class RReader:
    """Reads R's XDR serialization ("X\\n" format) into Python values."""

    def __init__(self, data):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.d, self.p, self.refs = data, 2, []
        version = self.int()
        self.int()  # the R version that wrote it
        self.int()  # the oldest R version that reads it
        if version == 3:
            n = self.int()  # then the native encoding's name
            self.p += n

    def int(self):
        v = struct.unpack_from(">i", self.d, self.p)[0]
        self.p += 4
        return v

    def length(self):
        n = self.int()
        if n == -1:
            hi, lo = self.int(), self.int()
            n = (hi << 32) + lo
        return n

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == 254:  # NILVALUE
            return None
        if kind in (253, 252, 251, 250, 242, 241):  # environments, markers
            return None
        if kind == 255:  # a back reference to a symbol or environment
            idx = flags >> 8 or self.int()
            return self.refs[idx - 1]
        if kind == 1:  # SYMSXP
            name = self.item()
            self.refs.append(name)
            return name
        if kind in (2, 6, 239, 240):  # pairlists and calls
            if has_attr or kind in (239, 240):
                self.item()  # the pairlist's own attributes: not needed
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            return [(tag, car)] + (cdr if isinstance(cdr, list) else [])
        if kind == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.d[self.p:self.p + n].decode("utf-8", "replace")
            self.p += n
            return s
        if kind in (10, 13):  # logical, integer
            n = self.length()
            v = list(struct.unpack_from(">%di" % n, self.d, self.p))
            self.p += 4 * n
        elif kind == 14:  # double
            n = self.length()
            v = list(struct.unpack_from(">%dd" % n, self.d, self.p))
            self.p += 8 * n
        elif kind in (16, 19, 20):  # character vector, list, expression
            v = [self.item() for _ in range(self.length())]
        else:
            raise ValueError("R serialization type %d not handled" % kind)
        if has_attr:
            attrs = dict(self.item() or [])
            if "names" in attrs and kind == 19:
                return dict(zip(attrs["names"], v))
        return v


def load(pkgdir, name):
    base = os.path.join(pkgdir, "data", "Rdata")
    index = RReader(gzip.open(base + ".rdx").read()).item()
    variables = index["variables"]
    offset, size = [int(x) for x in variables[name]]
    with open(base + ".rdb", "rb") as f:
        f.seek(offset)
        chunk = f.read(size)
    # Type-1 compression: a 4-byte big-endian length, then a zlib stream.
    return RReader(zlib.decompress(chunk[4:])).item()


# Northanger Abbey's text ends with a modern editor's note on the edition
# (not part of the work, and not Austen's): everything from this heading on
# is dropped.
EDITORIAL = {"northangerabbey": "A NOTE ON THE TEXT"}


def novel(pkgdir, name):
    lines = [l if l is not None else "" for l in load(pkgdir, name)]
    if name in EDITORIAL:
        lines = lines[:lines.index(EDITORIAL[name])]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def main():
    pkgdir = sys.argv[1]
    out = sys.stdout
    for i, (name, _title) in enumerate(NOVELS):
        lines = novel(pkgdir, name)
        if i:
            out.write("\n\n\n")
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
