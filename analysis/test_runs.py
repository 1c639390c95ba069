"""Tests for analysis/runs.py (run folders as pandas DataFrames), on the fake run folders of
test_report.py and on folders that are not runs.

Run from the repository root:  /usr/bin/python3 -m unittest analysis/test_runs.py
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import runs  # noqa: E402
from test_report import HEADER, make_run, rewrite_columns  # noqa: E402


class LoadRun(unittest.TestCase):
    def test_tables_of_one_run(self):
        with tempfile.TemporaryDirectory() as d:
            folder = os.path.join(d, "a")
            make_run(folder, clusters=2, stages=2, micro_batches=16, plan=True)
            r = runs.load_run(folder)
            self.assertEqual(list(r.metrics.columns), HEADER.split(","))   # the header make_run wrote
            self.assertGreater(len(r.metrics), 0)
            fwd = r.spans("forward")
            self.assertEqual(len(fwd), 2 * 2 * 16)                  # clusters x stages x micro-batches
            self.assertTrue((fwd["duration_s"] > 0).all())
            self.assertTrue((r.spans("send")["duration_s"] == 0).all())  # instants
            with open(os.path.join(folder, "eval.csv")) as f:
                self.assertEqual(list(r.eval.columns), f.readline().strip().split(","))
            self.assertEqual(len(r.per_node), 4)
            self.assertEqual(sorted(r.stages["node"].tolist()), [0, 1, 2, 3])
            self.assertIn("predicted_time_s", r.stages.columns)
            self.assertEqual(r.info["executor"], "sim")
            self.assertIn("training", r.scenario)

    def test_several_runs_stack_with_a_run_column(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            make_run(a, micro_batches=8)
            make_run(b, micro_batches=8, executor="real")
            both = runs.load_runs([a, b])
            self.assertEqual(set(both["metrics"]["run"]), {a, b})
            self.assertEqual(len(both["metrics"]), len(runs.load_run(a).metrics) + len(runs.load_run(b).metrics))
            self.assertEqual(set(both["per_node"]["run"]), {a, b})

    def test_what_is_not_a_run_is_refused_naming_the_file(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(runs.RunError, "no such folder"):
                runs.load_run(os.path.join(d, "missing"))
            os.makedirs(os.path.join(d, "empty"))
            with self.assertRaisesRegex(runs.RunError, "not a run folder"):
                runs.load_run(os.path.join(d, "empty"))
            folder = os.path.join(d, "bad")
            make_run(folder, micro_batches=4)
            with open(os.path.join(folder, "metrics.csv"), "w") as f:
                f.write("kind,node\nforward,0\n")
            with self.assertRaisesRegex(runs.RunError,
                                        "metrics.csv:1: bad header 'kind,node': no column 'start_s'"):
                runs.load_run(folder)
            with open(os.path.join(folder, "metrics.csv"), "w") as f:
                f.write(HEADER + "\n")
            with open(os.path.join(folder, "summary.json"), "w") as f:
                f.write("{not json")
            with self.assertRaisesRegex(runs.RunError, "summary.json: not valid JSON"):
                runs.load_run(folder)


class ColumnsByName(unittest.TestCase):
    """Tables are read by their header's names: older, newer and reordered files alike."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.folder = make_run(os.path.join(self.tmp.name, "a"), clusters=1, micro_batches=8, plan=True)
        self.metrics = os.path.join(self.folder, "metrics.csv")
        self.expected = runs.load_run(self.folder).metrics

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_folder_from_before_device_s_reads_with_it_nan(self):
        names = rewrite_columns(self.metrics, order=HEADER.split(","), drop=("device_s",))
        m = runs.load_run(self.folder).metrics
        self.assertEqual(list(m.columns), names)
        self.assertNotIn("device_s", m.columns)
        device = runs.column(m, "device_s")           # asked for by name: all NaN, not a KeyError
        self.assertEqual(len(device), len(m))
        self.assertTrue(device.isna().all())
        self.assertTrue((runs.load_run(self.folder).spans("forward")["duration_s"] > 0).all())

    def test_columns_in_another_order_and_an_unknown_one_read_by_name(self):
        names = rewrite_columns(self.metrics, extra=("future_s", "0.25"))
        self.assertEqual(names[:3], ["device_s", "future_s", "grad_norm2"])
        m = runs.load_run(self.folder).metrics
        self.assertEqual(list(m.columns), names)
        self.assertTrue((m["future_s"] == 0.25).all())
        for c in self.expected.columns:   # every column the same, by name
            self.assertTrue(m[c].equals(self.expected[c]), c)
        self.assertEqual(m["kind"].dtype, object)
        self.assertEqual(len(runs.load_run(self.folder).spans("forward")),
                         int((self.expected["kind"] == "forward").sum()))

    def test_a_header_without_end_s_is_refused_naming_file_and_column(self):
        rewrite_columns(self.metrics, order=HEADER.split(","), drop=("end_s",))
        with self.assertRaises(runs.RunError) as e:
            runs.load_run(self.folder)
        self.assertIn(self.metrics, str(e.exception))
        self.assertIn("no column 'end_s'", str(e.exception))
        rewrite_columns(os.path.join(self.folder, "eval.csv"), drop=("test_loss",))
        with self.assertRaisesRegex(runs.RunError, "eval.csv:1: bad header .*no column 'test_loss'"):
            runs.read_table(os.path.join(self.folder, "eval.csv"), runs.EVAL_REQUIRED)

    def test_rows_that_do_not_match_the_header_are_refused_with_their_line(self):
        with open(self.metrics) as f:
            rows = f.read()
        n = len(rows.splitlines()) + 2   # after an empty line (no row, but a line)
        for bad, message in (("forward,0,0", f"metrics.csv:{n}: 3 fields, expected 17"),
                             ("forward,0,0,0,1,1,0.1,0.2,,,,,,,,,,",
                              f"metrics.csv:{n}: 18 fields, expected 17"),
                             ('"forward",0,0,0,1,1,0.1,"0,2",,,,,,,,,',   # quoted: one field
                              f"metrics.csv:{n}: column 'end_s': not a number: '0,2'"),
                             ('"forward",0,0,0,1,1,0.1,"0.2",,', f"metrics.csv:{n}: 10 fields, expected 17"),
                             ("forward,0,0,0,1,1,0.1,late,,,,,,,,,",
                              f"metrics.csv:{n}: column 'end_s': not a number: 'late'"),
                             ('"forward",0,0,0,1,1,0.1,"late",,,,,,,,,',
                              f"metrics.csv:{n}: column 'end_s': not a number: 'late'")):
            with open(self.metrics, "w") as f:
                f.write(rows + "\n" + bad + "\n")
            with self.assertRaisesRegex(runs.RunError, message):
                runs.load_run(self.folder)
        with open(self.metrics, "w") as f:   # quoted fields read as the csv module reads them
            f.write(rows + '"forward",0,0,0,1,1,0.1,"0.2",,,,,,,,,\n')
        self.assertEqual(runs.load_run(self.folder).metrics["end_s"].iloc[-1], 0.2)

    def test_empty_fields_and_printf_nan_are_nan_and_theory_csv_reads(self):
        with open(self.metrics, "a") as f:
            f.write("loss,1,0,1,9,9,nan,-nan,,,,,,,,,\n")
        m = runs.load_run(self.folder).metrics
        self.assertTrue(m["start_s"].iloc[-1] != m["start_s"].iloc[-1])
        self.assertTrue(runs.column(m, "loss").iloc[:-1].isna().any())
        with open(os.path.join(self.folder, "theory.csv"), "w") as f:
            f.write("bound,k,running_mean,grad_norm2\n10,0,1,1\n5,1,0.75,0.5\n")
        r = runs.load_run(self.folder)
        self.assertEqual(r.theory_curve["k"].tolist(), [0, 1])
        self.assertEqual(r.theory_curve["bound"].tolist(), [10, 5])
        self.assertIsNone(r.theory)


if __name__ == "__main__":
    unittest.main()
