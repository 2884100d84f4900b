# tools/nccl_test.py's host-side logic (and tools/nccl_rounds.py), without
# GPUs or torch: medians, how ranks' rows merge, how interleaved rounds
# combine, the bench worker's rows (torch stood in for), and bad flags.
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                     "tools")
sys.path.insert(0, TOOLS)
import nccl_launch  # noqa: E402
import nccl_rounds  # noqa: E402
import nccl_test  # noqa: E402


def row(size, time_us, host_us=10.0, ref_ms=7.0, blocked=0, preempted=0,
        pipe_us=None, lat_us=None):
    return {"bytes": size, "time_us": time_us, "busbw": size / time_us / 1e3,
            "host_us": host_us, "ref_ms": ref_ms, "blocked": blocked,
            "preempted": preempted, "pipe_us": pipe_us, "lat_us": lat_us}


class MedianTest(unittest.TestCase):
    def test_odd_and_even(self):
        self.assertEqual(nccl_test.median([5.0, 1.0, 3.0]), 3.0)
        self.assertEqual(nccl_test.median([4.0, 1.0, 3.0, 2.0]), 2.5)
        self.assertEqual(nccl_test.median([7.0]), 7.0)


class MergeRanksTest(unittest.TestCase):
    def test_rank0_times_slowest_host_and_reference_all_blocked_loops(self):
        r0 = [row(4, 20.0, host_us=12.0, ref_ms=7.0, blocked=1,
                  preempted=5),
              row(64, 21.0, host_us=19.0, ref_ms=8.0)]
        r1 = [row(4, 99.0, host_us=18.0, ref_ms=12.0, blocked=2),
              row(64, 98.0, host_us=11.0, ref_ms=6.0, preempted=7)]
        m = nccl_test.merge_ranks([r0, r1])
        self.assertEqual([r["time_us"] for r in m], [20.0, 21.0])
        self.assertEqual([r["host_us"] for r in m], [18.0, 19.0])
        self.assertEqual([r["ref_ms"] for r in m], [12.0, 8.0])
        self.assertEqual([r["blocked"] for r in m], [3, 0])
        self.assertEqual([r["preempted"] for r in m], [5, 7])
        self.assertEqual(r0[0]["ref_ms"], 7.0)  # inputs untouched


class CombineRoundsTest(unittest.TestCase):
    def setUp(self):
        # 4 B: UCCL 30/20/40 (median 30), Socket 25/30/50 (30), 4x4
        # 35/22/45 (35). 256 MiB: UCCL 10/12/11, Socket 40/40/40, 4x4
        # 25/30/20 (25).
        M = 256 << 20
        self.rounds = [
            {"UCCL": [row(4, 30.0), row(M, 10.0, host_us=5.0)],
             "Socket": [row(4, 25.0), row(M, 40.0)],
             "Socket_4x4": [row(4, 35.0), row(M, 25.0)]},
            {"UCCL": [row(4, 20.0, host_us=18.0), row(M, 12.0)],
             "Socket": [row(4, 30.0), row(M, 40.0)],
             "Socket_4x4": [row(4, 22.0), row(M, 30.0)]},
            {"UCCL": [row(4, 40.0, host_us=38.0), row(M, 11.0)],
             "Socket": [row(4, 50.0), row(M, 40.0)],
             "Socket_4x4": [row(4, 45.0), row(M, 20.0)]},
        ]

    def test_medians_ratio_and_wins(self):
        c = nccl_test.combine_rounds(self.rounds, "UCCL",
                                     ["Socket", "Socket_4x4"])
        self.assertEqual([r["bytes"] for r in c], [4, 256 << 20])
        small, big = c
        self.assertEqual(small["time_us"],
                         {"UCCL": 30.0, "Socket": 30.0, "Socket_4x4": 35.0})
        self.assertEqual(small["host_us"], 18.0)
        self.assertEqual(small["host_net_us"],
                         {"UCCL": 18.0, "Socket": 10.0, "Socket_4x4": 10.0})
        self.assertEqual(small["best_baseline_us"], 30.0)
        self.assertEqual(small["best_baseline"], "Socket")
        self.assertEqual(big["best_baseline"], "Socket_4x4")
        self.assertAlmostEqual(small["ratio"], 1.0)
        # Round 1: 30 > 25 lost; round 2: 20 <= 22 won; round 3: 40 won.
        self.assertEqual((small["wins"], small["played"]), (2, 3))
        self.assertAlmostEqual(big["ratio"], 25.0 / 11.0)
        self.assertEqual((big["wins"], big["played"]), (3, 3))
        self.assertEqual(big["rounds"]["UCCL"], 3)

    def test_a_failed_run_leaves_its_round_out(self):
        del self.rounds[1]["Socket"]
        del self.rounds[1]["Socket_4x4"]
        c = nccl_test.combine_rounds(self.rounds, "UCCL",
                                     ["Socket", "Socket_4x4"])
        small = c[0]
        self.assertEqual(small["rounds"], {"UCCL": 3, "Socket": 2,
                                           "Socket_4x4": 2})
        self.assertEqual(small["time_us"]["Socket"], 37.5)
        self.assertEqual((small["wins"], small["played"]), (1, 2))

    def test_pipeline_and_latency_medians_and_ratios(self):
        # UCCL pipeline 20/22/(none: the host never got ahead), Socket
        # 30/26/28, 4x4 none; latency UCCL 50/60/55, Socket 40/45/70, 4x4
        # 50/50/50.
        for rd, (up, ul, sp, sl, fl) in zip(self.rounds, [
                (20.0, 50.0, 30.0, 40.0, 50.0), (22.0, 60.0, 26.0, 45.0, 50.0),
                (None, 55.0, 28.0, 70.0, 50.0)]):
            rd["UCCL"][0].update(pipe_us=up, lat_us=ul)
            rd["Socket"][0].update(pipe_us=sp, lat_us=sl)
            rd["Socket_4x4"][0].update(lat_us=fl)
        small = nccl_test.combine_rounds(self.rounds, "UCCL",
                                         ["Socket", "Socket_4x4"])[0]
        self.assertEqual(small["pipe_us"], {"UCCL": 21.0, "Socket": 28.0})
        self.assertEqual(small["best_baseline_pipe_us"], 28.0)
        self.assertAlmostEqual(small["pipe_ratio"], 28.0 / 21.0)
        self.assertEqual(small["lat_us"],
                         {"UCCL": 55.0, "Socket": 45.0, "Socket_4x4": 50.0})
        self.assertEqual(small["best_baseline_lat_us"], 45.0)
        self.assertAlmostEqual(small["lat_ratio"], 45.0 / 55.0)
        big = nccl_test.combine_rounds(self.rounds, "UCCL", ["Socket"])[1]
        self.assertEqual(big["pipe_us"], {})  # no run gave a figure
        self.assertIsNone(big["pipe_ratio"])

    def test_rounds_apart_per_measure_against_its_best_baseline(self):
        # Loop: UCCL 30/20/40 against Socket 25/30/50 (best median): they
        # overlap. Pipeline: UCCL 20/21/22 against the 4x4 run's 23/24/30
        # (best median; Socket's 22/40/40 overlaps UCCL): all faster.
        # Latency: UCCL 70/71/72 against Socket 60/61/69: all slower.
        for rd, (up, sp, fp, ul, sl) in zip(self.rounds, [
                (20.0, 22.0, 23.0, 70.0, 60.0), (21.0, 40.0, 24.0, 71.0, 61.0),
                (22.0, 40.0, 30.0, 72.0, 69.0)]):
            rd["UCCL"][0].update(pipe_us=up, lat_us=ul)
            rd["Socket"][0].update(pipe_us=sp, lat_us=sl)
            rd["Socket_4x4"][0].update(pipe_us=fp)
        small = nccl_test.combine_rounds(self.rounds, "UCCL",
                                         ["Socket", "Socket_4x4"])[0]
        self.assertEqual(small["apart"], {"time_us": "level",
                                          "pipe_us": "faster",
                                          "lat_us": "slower"})
        # Two rounds of a side are too few to say.
        del self.rounds[2]["UCCL"]
        small = nccl_test.combine_rounds(self.rounds, "UCCL",
                                         ["Socket", "Socket_4x4"])[0]
        self.assertEqual(small["apart"], {"time_us": None, "pipe_us": None,
                                          "lat_us": None})

    def test_rounds_apart(self):
        self.assertEqual(nccl_rounds.rounds_apart([1, 2, 3], [4, 5, 6]),
                         "faster")
        self.assertEqual(nccl_rounds.rounds_apart([7, 5, 6], [1, 2, 4.9]),
                         "slower")
        self.assertEqual(nccl_rounds.rounds_apart([1, 2, 5], [4, 6, 7]),
                         "level")
        # A tie is no win either way.
        self.assertEqual(nccl_rounds.rounds_apart([1, 2, 4], [4, 5, 6]),
                         "level")
        self.assertIsNone(nccl_rounds.rounds_apart([1, 2], [4, 5, 6]))
        self.assertIsNone(nccl_rounds.rounds_apart([1, 2, 3], []))

    def test_no_baseline_gives_no_ratio(self):
        c = nccl_test.combine_rounds([{"UCCL": [row(4, 30.0)]}], "UCCL",
                                     ["Socket"])
        self.assertIsNone(c[0]["ratio"])
        self.assertEqual((c[0]["wins"], c[0]["played"]), (0, 0))


class SuiteTest(unittest.TestCase):
    """run_suite with run_bench replaced: what the summary says."""

    def run_suite(self, times, fail=(), host=None, share_gpu=False):
        calls = []

        def fake_bench(a, world, tmp, net, threads=0, socks=0, label=None,
                       channels=0, tag=""):
            key = ("Socket_4x4" if threads else net) + tag
            calls.append(key if not channels else key + "-8ch")
            if key in fail:
                raise RuntimeError("process 1 terminated with exit code 1")
            t = times.get(net if not threads else "Socket_4x4", 50.0)
            # Pipeline: UCCL 2 us faster than its loop, the others as
            # theirs; latency: 60 us each, UCCL's none for Socket 4x4.
            p = t - 2.0 if net == "UCCL" else t
            h = (host or {}).get(net if not threads else "Socket_4x4", 10.0)
            return [row(4, t, host_us=h, pipe_us=p, lat_us=60.0),
                    row(256 << 20, t * 100)], True

        class A:
            rounds = 3
        A.share_gpu = share_gpu
        old = nccl_test.run_bench
        nccl_test.run_bench = fake_bench
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                ok, summary = nccl_test.run_suite(A(), 2, "/nonexistent")
        finally:
            nccl_test.run_bench = old
        return ok, summary, buf.getvalue(), calls

    def test_rotated_rounds_and_verdicts(self):
        ok, summary, out, calls = self.run_suite(
            {"UCCL": 20.0, "Socket": 25.0, "Socket_4x4": 41.0})
        self.assertTrue(ok)
        self.assertEqual(calls[:9], [
            "UCCL-r0", "Socket-r0", "Socket_4x4-r0",
            "Socket-r1", "Socket_4x4-r1", "UCCL-r1",
            "Socket_4x4-r2", "UCCL-r2", "Socket-r2"])
        self.assertEqual(len(summary["rounds"]), 3)
        self.assertIn("| 4 | 20.0 | 25.0 | 41.0 |", out)
        self.assertIn("| 1.25 | 3/3 |", out)
        self.assertIn("1.25x (target >= 2x)", out)
        self.assertIn("no slower than Socket by loop time (medians): yes "
                      "(ratios 1.25)", out)
        # Loop / host: 20 / 10 and 25 / 10 (the fake's host time is 10 us).
        self.assertIn("| 4 | 1.25 | 2.00 | 2.50 | 18.0 | 25.0 | 1.39 | 60.0 "
                      "| 60.0 | 1.00 |", out)
        self.assertIn("by pipeline (medians): yes (ratios 1.39)", out)
        self.assertIn("by latency (medians): yes (ratios 1.00)", out)
        self.assertIn("by loop time, UCCL's rounds against the best Socket "
                      "run's", out)
        self.assertIn("they overlap): faster 4 B; no slower: yes", out)
        # 60 us each: a tie.
        self.assertIn("by latency, UCCL's", out)
        self.assertIn("they overlap): level 4 B; no slower: yes", out)
        self.assertNotIn("host-bound loops", out)

    def test_no_nvlink_floor_on_a_shared_gpu(self):
        times = {"UCCL": 20.0, "Socket": 25.0, "Socket_4x4": 41.0}
        _, _, out, calls = self.run_suite(times)
        self.assertEqual(calls[-1], "P2P")
        self.assertIn("| 4 | 20.0 | 25.0 | 41.0 |", out)
        _, _, out, calls = self.run_suite(times, share_gpu=True)
        self.assertNotIn("P2P", calls)  # ranks of two "hosts": no floor
        self.assertRegex(out, r"\| 4 \| 20\.0 \| 25\.0 \| 41\.0 \|[^\n]*\| - \|\n")

    def test_host_bound_loops_are_named(self):
        # Both loops within 10% of their host time: UCCL 30 against 28,
        # Socket 25 against 24 (the best baseline; the 4x4 run's 41 against
        # 24 is not what the ratio compares).
        ok, _, out, _ = self.run_suite(
            {"UCCL": 30.0, "Socket": 25.0, "Socket_4x4": 41.0},
            host={"UCCL": 28.0, "Socket": 24.0, "Socket_4x4": 24.0})
        self.assertIn("| 4 | 0.83 | 1.07 | 1.04 |", out)
        self.assertIn("host-bound loops (UCCL's and the best Socket run's "
                      "loop within 10% of their hosts' issue time): 4 B;", out)
        # UCCL's host keeps up but Socket's loop waits on its network: not
        # host-bound.
        _, _, out, _ = self.run_suite(
            {"UCCL": 30.0, "Socket": 25.0, "Socket_4x4": 41.0},
            host={"UCCL": 28.0, "Socket": 20.0, "Socket_4x4": 24.0})
        self.assertIn("| 4 | 0.83 | 1.07 | 1.25 |", out)
        self.assertNotIn("host-bound loops", out)

    def test_slower_small_size_and_a_failed_run(self):
        ok, summary, out, _ = self.run_suite(
            {"UCCL": 30.0, "Socket": 25.0, "Socket_4x4": 41.0},
            fail=("Socket-r1",))
        self.assertFalse(ok)
        self.assertIn("Socket, round 2: FAILED", out)
        self.assertNotIn("Socket", summary["rounds"][1])
        # Round 2 is played against the 4x4 run alone (30 <= 41).
        self.assertIn("| 0.83 | 1/3 |", out)
        self.assertIn("FAILED (process 1 terminated with exit code 1)", out)
        self.assertIn("no slower than Socket by loop time (medians): no "
                      "(ratios 0.83)", out)
        # 28 against 25: slower by pipeline too.
        self.assertIn("by pipeline (medians): no (ratios 0.89)", out)
        # The best Socket run by median (25 us) has two rounds: too few to
        # call a side faster or slower.
        self.assertIn("they overlap): too few rounds 4 B; no slower: -", out)
        # With all three rounds, 28 against 25 each time is slower.
        _, _, out, _ = self.run_suite(
            {"UCCL": 30.0, "Socket": 25.0, "Socket_4x4": 41.0})
        self.assertRegex(out, r"by pipeline, UCCL's .* they overlap\): "
                         r"slower 4 B; no slower: no")


class BenchWorkerTest(unittest.TestCase):
    """bench_worker with a stand-in for torch: what each rank writes."""

    def run_worker(self, held):
        """One rank's rows for 4 B and 1 KiB, 3 sweeps of 7 calls; `held`:
        whether the GPU sleep still held the stream when the host had
        issued the pipeline's calls."""
        calls = []

        class Buf:
            device = "cuda:1"

            def __getitem__(self, sl):
                return self

            def fill_(self, v):
                pass

        class Flag:  # the ranks' agreement on `held`
            def __init__(self, v):
                self.v = v

            def item(self):
                return self.v

        class FakeEvent:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                calls.append("record")

            def query(self):
                return not held

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return 0.7  # ms, over 7 calls: 100 us each

        class Torch:
            class cuda:
                Event = FakeEvent

                @staticmethod
                def synchronize():
                    pass

                @staticmethod
                def _sleep(cycles):
                    calls.append(("sleep", cycles))

            @staticmethod
            def tensor(v, device=None):
                return Flag(v[0])

            @staticmethod
            def device(kind, rank):
                return (kind, rank)

            @staticmethod
            def empty(n, device=None):
                calls.append(("empty", n))
                return Buf()

        class Dist:
            class ReduceOp:
                MIN = "min"

            @staticmethod
            def all_reduce(x, op=None):
                calls.append("all_reduce" if op is None else op)

            @staticmethod
            def barrier():
                calls.append("barrier")

            @staticmethod
            def destroy_process_group():
                calls.append("destroyed")

        old = nccl_test.init, nccl_test.cpu_reference_ms
        nccl_test.init = lambda rank, world, port: (Torch, Dist)

        def ref():
            calls.append("ref")
            return 7.0
        nccl_test.cpu_reference_ms = ref
        try:
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "bench.json")
                nccl_test.bench_worker(1, 2, 0, out, [4, 1024], 7, reps=3)
                with open(out + ".1") as f:
                    rows = json.load(f)
                self.assertFalse(os.path.exists(out + ".0"))
        finally:
            nccl_test.init, nccl_test.cpu_reference_ms = old
        return rows, calls

    def test_rows_per_size_with_host_cpu_and_switch_counts(self):
        rows, calls = self.run_worker(held=True)
        self.assertEqual([r["bytes"] for r in rows], [4, 1024])
        for r in rows:
            self.assertEqual(len(r["reps_us"]), 3)
            self.assertAlmostEqual(r["time_us"],
                                   nccl_test.median(r["reps_us"]))
            self.assertGreater(r["ref_ms"], 0)
            self.assertLessEqual(r["blocked"], 3)  # loops, not switches
            self.assertGreaterEqual(r["preempted"], 0)
            self.assertGreater(r["host_us"], 0)
            self.assertAlmostEqual(r["pipe_us"], 100.0)
            self.assertGreater(r["lat_us"], 0)
        # Per size and sweep: 3 warm-up calls, 7 timed, 1 + 7 behind the
        # GPU sleep (held at least 20 ms at 2 GHz), 7 one at a time, and the
        # ranks' agreement that the sleep held.
        self.assertEqual(calls.count("all_reduce"),
                         2 * 3 * (3 + 7 + 1 + 7 + 7))
        self.assertEqual(calls.count("min"), 2 * 3)
        sleeps = [i for i, c in enumerate(calls) if c[0] == "sleep"]
        self.assertEqual(len(sleeps), 2 * 3)
        self.assertTrue(all(calls[i][1] >= 4e7 for i in sleeps))
        # The ranks meet at a barrier after the CPU reference, right before
        # the timed calls (a rank that started earlier would time the other
        # rank's reference).
        refs = [i for i, c in enumerate(calls) if c == "ref"]
        self.assertEqual(len(refs), 2 * 3)
        for i in refs:
            self.assertEqual(calls[i + 1:i + 9],
                             ["barrier"] + 7 * ["all_reduce"])
        # The pipeline's timing starts after one call past the sleep, which
        # no GPU leaves before both ranks' sleeps end.
        for i in sleeps:
            self.assertEqual(calls[i + 1:i + 3], ["all_reduce", "record"])
        self.assertEqual(calls[0], ("empty", 256))
        self.assertEqual(calls[-1], "destroyed")

    def test_no_pipeline_figure_when_the_host_did_not_get_ahead(self):
        rows, _ = self.run_worker(held=False)
        self.assertEqual([r["pipe_us"] for r in rows], [None, None])
        self.assertTrue(all(r["lat_us"] > 0 for r in rows))


class ShareGpuTest(unittest.TestCase):
    def test_every_rank_on_gpu_0_when_shared(self):
        old = os.environ.pop(nccl_launch.SHARE_GPU_ENV, None)
        try:
            self.assertEqual([nccl_launch.rank_gpu(r) for r in range(3)],
                             [0, 1, 2])
            self.assertEqual(nccl_launch.rank_gpu(2, share_gpu=True), 0)
            os.environ[nccl_launch.SHARE_GPU_ENV] = "1"  # as --share-gpu sets
            self.assertEqual([nccl_launch.rank_gpu(r) for r in range(3)],
                             [0, 0, 0])
            self.assertEqual(nccl_launch.rank_gpu(2, share_gpu=False), 2)
        finally:
            os.environ.pop(nccl_launch.SHARE_GPU_ENV, None)
            if old is not None:
                os.environ[nccl_launch.SHARE_GPU_ENV] = old

    def test_nvlink_floor_is_refused_on_a_shared_gpu(self):
        p = subprocess.run(
            [sys.executable, os.path.join(TOOLS, "nccl_test.py"), "bench",
             "--net", "P2P", "--share-gpu"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("--share-gpu: P2P needs the ranks on one host",
                      p.stderr)


class FlagsTest(unittest.TestCase):
    def test_zero_rounds_reps_or_iters_is_refused(self):
        for flag in ("--rounds", "--reps", "--iters"):
            p = subprocess.run(
                [sys.executable, os.path.join(TOOLS, "nccl_test.py"), "suite",
                 flag, "0"], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, flag)
            self.assertIn("%s 0: give at least 1" % flag, p.stderr)


if __name__ == "__main__":
    unittest.main()
