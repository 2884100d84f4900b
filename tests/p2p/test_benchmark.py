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


def run_pair(mode, tmp_path):
    server = subprocess.Popen(
        [sys.executable, BENCH, "--role", "server", "--port", "0",
         "--mode", mode] + COMMON,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
         "--mode", mode, "--json", str(out)] + COMMON,
        capture_output=True, text=True, timeout=120)
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
