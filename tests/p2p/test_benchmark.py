"""p2p/benchmark.py end to end: a server and a client process per mode,
every transfer verified, the output and the JSON parsed; a client with no
server fails with one line."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "p2p", "benchmark.py")
COMMON = ["--num-cpus", "2", "--nic", "udp:lo", "--sizes", "0,1K,64K,1M",
          "--iters", "20", "--async-depth", "4", "--verify",
          "--timeout-ms", "20000"]


def run_pair(mode, tmp_path, common=COMMON, env=None):
    server = subprocess.Popen(
        [sys.executable, BENCH, "--role", "server", "--port", "0",
         "--mode", mode] + common,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    port = None
    head = []
    for line in server.stdout:
        head.append(line)
        if line.startswith("listening on port "):
            port = int(line.split()[-1])
            break
    assert port, "".join(head)
    out = tmp_path / f"{mode}.json"
    client = subprocess.run(
        [sys.executable, BENCH, "--role", "client", "--port", str(port),
         "--mode", mode, "--json", str(out)] + common,
        capture_output=True, text=True, timeout=120, env=env)
    s_out, _ = server.communicate(timeout=120)
    assert client.returncode == 0, client.stdout + client.stderr
    assert server.returncode == 0, "".join(head) + s_out
    return client.stdout, json.loads(out.read_text())


@pytest.mark.parametrize("mode", ["send", "write", "read"])
def test_every_mode_moves_verified_data(mode, tmp_path):
    text, js = run_pair(mode, tmp_path)
    assert f"Mode: {mode}" in text
    rows = [l for l in text.splitlines() if l.startswith("[Client]") and
            " : " in l]
    assert len(rows) == 4, text
    assert "data verified" in text
    assert [r["bytes"] for r in js["results"]] == [0, 1024, 65536, 1 << 20]
    assert all(r["gbps"] > 0 for r in js["results"][1:])
    assert all(r["lat_us"] > 0 for r in js["results"])
    pp = [r["pingpong_us"] for r in js["results"]]
    if mode == "send":  # a ping-pong up to 64 KiB
        assert all(v > 0 for v in pp[:3]) and pp[3] is None, pp
    else:
        assert pp == [None] * 4


def matrix_flags(sizes, iters, depth):
    return ["--num-cpus", "2", "--nic", "udp:lo", "--sizes", sizes,
            "--iters", str(iters), "--async-depth", str(depth), "--verify",
            "--timeout-ms", "30000"]


@pytest.mark.parametrize("mode", ["send", "write", "read"])
def test_every_mode_every_size_depth_1(mode, tmp_path):
    """0 B to 64 MiB one at a time, every byte checked."""
    _, js = run_pair(mode, tmp_path, matrix_flags("0,1,4K,1M,64M", 3, 1))
    assert [r["bytes"] for r in js["results"]] == [0, 1, 4096, 1 << 20,
                                                   64 << 20]


@pytest.mark.parametrize("mode", ["send", "write", "read"])
def test_every_mode_sixteen_outstanding(mode, tmp_path):
    _, js = run_pair(mode, tmp_path, matrix_flags("1,4K,1M", 64, 16))
    assert [r["iters"] for r in js["results"]] == [64, 64, 64]


@pytest.mark.parametrize("mode", ["send", "write", "read"])
def test_every_mode_under_one_percent_loss(mode, tmp_path):
    """Both processes drop 1% of the packets they send: still byte-exact."""
    env = dict(os.environ, UCCL_FAULT_TX="drop=0.01")
    _, js = run_pair(mode, tmp_path, matrix_flags("4K,1M,8M", 8, 4), env)
    assert len(js["results"]) == 3


def test_bidirectional_moves_both_ways(tmp_path):
    text, js = run_pair("send", tmp_path,
                        matrix_flags("4K,1M", 16, 4) + ["--bidirectional"])
    assert "Mode: send (bidirectional)" in text
    assert js["bidirectional"] and len(js["results"]) == 2


def test_client_without_server_fails_with_one_line():
    r = subprocess.run(
        [sys.executable, BENCH, "--role", "client", "--port", "1",
         "--timeout-ms", "2000"] + COMMON[:4],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    errors = [l for l in r.stderr.splitlines() if "error:" in l]
    assert len(errors) == 1, r.stderr


def test_bad_flags_are_usage_errors():
    r = subprocess.run([sys.executable, BENCH, "--role", "client",
                        "--sizes", "12Q"], capture_output=True, text=True)
    assert r.returncode == 2 and "bad size" in r.stderr
    for bad in (["--bidirectional", "--mode", "read"],):
        r = subprocess.run([sys.executable, BENCH, "--role", "client"] + bad,
                           capture_output=True, text=True)
        assert r.returncode == 2 and "--mode send" in r.stderr, r.stderr
