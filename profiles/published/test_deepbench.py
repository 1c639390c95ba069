"""Tests of deepbench.py's transcription (run by ctest): GEMM and convolution rows become samples
with DeepBench's own flop counts; other sections and incomplete rows are left out; a workbook is
read from its zip of XML."""
import os
import sys
import tempfile
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepbench  # noqa: E402

GEMM_HEAD = ["Dense Matrix Multiplication", "", "M", "N", "K", "A Transpose", "B Transpose", "", "Time (msec)", "TERAFLOPS"]


def conv_row(fwd="0.411", bwd_in="1.514", bwd_w="0.84"):
    # W, H, C, N, K, S, R, pads, strides, three times, blank, output W and H (DeepBench's layout)
    return ["", "", "700", "161", "1", "16", "32", "5", "20", "0", "0", "2", "2", fwd, bwd_in, bwd_w, "",
            "78.5", "340.5"]


class Transcription(unittest.TestCase):
    def test_gemm_rows(self):
        rows = [["Precision", "Float"], GEMM_HEAD,
                ["", "", "1760", "16", "1760", "N", "N", "", "0.058", "1.709"],
                ["", "", "1760", "16", "1760", "T", "N", "", "0.091", "1.089"],
                ["", "", "35", "8457", "", "N", "N", "", "0.27", ""]]  # K missing: left out
        got = deepbench.samples(rows)
        self.assertEqual(len(got), 2)
        p, kind, case, ops, flops, nbytes, seconds = got[0]
        self.assertEqual((p, kind, ops), ("forward", "matmul", 1))
        self.assertEqual(flops, 2 * 1760 * 16 * 1760)
        self.assertEqual(nbytes, 4 * (1760 * 1760 + 1760 * 16 + 1760 * 16))
        self.assertAlmostEqual(seconds, 58e-6)
        # DeepBench's own TFLOPS column agrees with these flops.
        self.assertAlmostEqual(flops / seconds / 1e12, 1.709, places=2)
        self.assertEqual(got[1][0], "backward")

    def test_conv_rows_and_other_sections(self):
        rows = [["Convolution"], conv_row(), conv_row(bwd_in=""),
                ["Recurrent Layers - Vanilla", "", "Hidden Units"], ["", "", "1760", "16", "50", "", "1.0", "2.0"]]
        got = deepbench.samples(rows)
        self.assertEqual([g[0] for g in got], ["forward", "backward", "backward", "forward", "backward"])
        flops = 2 * 16 * 32 * 1 * 20 * 5 * 78.5 * 340.5
        self.assertEqual(got[0][4], flops)
        self.assertAlmostEqual(flops / got[0][6] / 1e12, 6.6595, places=3)  # DeepBench's forward TFLOPS
        self.assertTrue(got[2][2].endswith("to weights"))

    def test_workbook(self):
        sheet = ('<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
                 '<row><c r="A1" t="s"><v>0</v></c></row>'
                 '<row><c r="C2"><v>512</v></c><c r="D2"><v>32</v></c><c r="E2"><v>512</v></c>'
                 '<c r="F2" t="s"><v>1</v></c><c r="G2" t="s"><v>1</v></c><c r="I2"><v>0.006</v></c></row>'
                 '</sheetData></worksheet>')
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.xlsx")
            with zipfile.ZipFile(path, "w") as z:
                z.writestr("xl/workbook.xml", '<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" '
                           'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets>'
                           '<sheet name="FP32" sheetId="1" r:id="rId1"/></sheets></workbook>')
                z.writestr("xl/_rels/workbook.xml.rels", '<Relationships xmlns="http://schemas.openxmlformats.org/'
                           'package/2006/relationships"><Relationship Id="rId1" Target="worksheets/sheet1.xml"/>'
                           '</Relationships>')
                z.writestr("xl/worksheets/sheet1.xml", sheet)
                z.writestr("xl/sharedStrings.xml", '<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
                           '<si><t>Dense Matrix Multiplication</t></si><si><t>N</t></si></sst>')
            rows, name = deepbench.first_sheet_rows(path)
        self.assertEqual(name, "FP32")
        got = deepbench.samples(rows)
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0][2], "gemm 512x32x512 NN")


if __name__ == "__main__":
    unittest.main()
