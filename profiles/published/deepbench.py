"""Transcribes one of Baidu's DeepBench training-results workbooks (results/train/DeepBench_NV_*.xlsx
in the DeepBench repository, Apache License 2.0) into a samples file for `ravnest calibrate --from`:
every single-precision GEMM and convolution kernel with its published time, in the conventions of
calibrate/calibrate.h (flops of the kernel, bytes its operands and result move once, in float32).

    deepbench.py WORKBOOK.xlsx > DEVICE.csv

GEMMs (M, N, K, transposes): 2 M N K flops over 4 (M K + K N + M N) bytes; N,N is a forward
kernel, a transposed operand one of the backward's (a training step's gradients are products with
a transpose). Convolutions (W, H, C, N, K, R x S filters, output W' x H'): 2 N K C R S W' H' flops
over 4 (N C H W + K C R S + N K H' W') bytes, the same flops DeepBench's own TFLOPS column uses;
the forward time is a forward sample, the backward to the inputs and to the weights are one
backward sample each (work.h: the backward of a convolution is one operation per gradient). Rows
with a time missing are left out. Nothing is fitted here: it only transcribes. Only the standard
library: the workbook is a zip of XML.
"""
import re
import sys
import xml.etree.ElementTree as ET
import zipfile

MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
FLOAT = 4
HEADER = "pass,kind,case,ops,flops,bytes,seconds,fixed_cost"


def column(ref):
    n = 0
    for ch in re.match(r"[A-Z]+", ref).group(0):
        n = n * 26 + ord(ch) - 64
    return n - 1


def first_sheet_rows(path):
    """The rows of the workbook's first sheet (the single-precision results), as lists of strings."""
    z = zipfile.ZipFile(path)
    shared = []
    if "xl/sharedStrings.xml" in z.namelist():
        for si in ET.fromstring(z.read("xl/sharedStrings.xml")).iter(MAIN + "si"):
            shared.append("".join(t.text or "" for t in si.iter(MAIN + "t")))
    book = ET.fromstring(z.read("xl/workbook.xml"))
    rels = {r.get("Id"): r.get("Target") for r in ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))}
    sheet = next(book.iter(MAIN + "sheet"))
    rows = []
    for r in ET.fromstring(z.read("xl/" + rels[sheet.get(REL)].lstrip("/").removeprefix("xl/"))).iter(MAIN + "row"):
        cells = {}
        for c in r.findall(MAIN + "c"):
            v = c.find(MAIN + "v")
            if v is not None:
                cells[column(c.get("r"))] = shared[int(v.text)] if c.get("t") == "s" else v.text
        if cells:
            rows.append([cells.get(i, "") for i in range(max(cells) + 1)])
    return rows, sheet.get("name")


def number(x):
    try:
        return float(x)
    except ValueError:
        return None


def samples(rows):
    out, section = [], None
    for r in rows:
        head = r[0].strip().lower()
        if head.startswith("dense matrix"):
            section = "gemm"
            continue
        if head.startswith("convolution"):
            section = "conv"
            continue
        if head:  # recurrent layers, all-reduce, sparse: not layers this project models
            section = None
            continue
        if section == "gemm" and len(r) >= 9:
            m, n, k, ms = number(r[2]), number(r[3]), number(r[4]), number(r[8])
            if None in (m, n, k, ms) or ms <= 0:
                continue
            ta, tb = r[5].strip(), r[6].strip()
            flops = 2 * m * n * k
            nbytes = FLOAT * (m * k + k * n + m * n)
            pass_ = "forward" if (ta, tb) == ("N", "N") else "backward"
            out.append((pass_, "matmul", f"gemm {m:.0f}x{n:.0f}x{k:.0f} {ta}{tb}", 1, flops, nbytes, ms / 1e3))
        elif section == "conv" and len(r) >= 17:
            w, h, c, n, k, s_, r_ = (number(x) for x in r[2:9])
            fwd, bwd_in, bwd_w = number(r[13]), number(r[14]), number(r[15])
            ow, oh = number(r[17]) if len(r) > 17 else None, number(r[18]) if len(r) > 18 else None
            if None in (w, h, c, n, k, s_, r_, ow, oh):
                continue
            flops = 2 * n * k * c * r_ * s_ * ow * oh
            nbytes = FLOAT * (n * c * h * w + k * c * r_ * s_ + n * k * oh * ow)
            label = f"conv {w:.0f}x{h:.0f}x{c:.0f} n{n:.0f} k{k:.0f} {r_:.0f}x{s_:.0f}"
            for pass_, ms, what in (("forward", fwd, ""), ("backward", bwd_in, " to inputs"),
                                    ("backward", bwd_w, " to weights")):
                if ms is not None and ms > 0:
                    out.append((pass_, "conv", label + what, 1, flops, nbytes, ms / 1e3))
    return out


def main(path):
    rows, sheet = first_sheet_rows(path)
    spec = dict((r[0], r[1]) for r in rows if len(r) >= 2 and r[0] in ("Precision",))
    got = samples(rows)
    if not got:
        sys.exit(f"{path}: no GEMM or convolution rows found in sheet '{sheet}'")
    print(f"# Transcribed by profiles/published/deepbench.py from Baidu DeepBench's training results "
          f"({path.rsplit('/', 1)[-1]}, sheet '{sheet}', precision {spec.get('Precision', '?')}; "
          f"DeepBench is under the Apache License 2.0).")
    print(HEADER)
    for p, kind, case, ops, flops, nbytes, seconds in got:
        print(f"{p},{kind},{case},{ops},{flops:.6g},{nbytes:.6g},{seconds:.6g},0")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
