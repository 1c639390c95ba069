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
from test_report import make_run  # noqa: E402


class LoadRun(unittest.TestCase):
    def test_tables_of_one_run(self):
        with tempfile.TemporaryDirectory() as d:
            folder = os.path.join(d, "a")
            make_run(folder, clusters=2, stages=2, micro_batches=16, plan=True)
            r = runs.load_run(folder)
            self.assertEqual(list(r.metrics.columns), runs.METRICS_COLUMNS)
            self.assertGreater(len(r.metrics), 0)
            fwd = r.spans("forward")
            self.assertEqual(len(fwd), 2 * 2 * 16)                  # clusters x stages x micro-batches
            self.assertTrue((fwd["duration_s"] > 0).all())
            self.assertTrue((r.spans("send")["duration_s"] == 0).all())  # instants
            self.assertEqual(list(r.eval.columns), runs.EVAL_COLUMNS)
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
            with self.assertRaisesRegex(runs.RunError, "metrics.csv: expected the columns"):
                runs.load_run(folder)
            with open(os.path.join(folder, "metrics.csv"), "w") as f:
                f.write(",".join(runs.METRICS_COLUMNS) + "\n")
            with open(os.path.join(folder, "summary.json"), "w") as f:
                f.write("{not json")
            with self.assertRaisesRegex(runs.RunError, "summary.json: not valid JSON"):
                runs.load_run(folder)


if __name__ == "__main__":
    unittest.main()
