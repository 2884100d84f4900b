#!/usr/bin/env python3
# The simulator against the engine: runs transport_test through the netns
# testbed's tc bottleneck and ccsim on the same setup, per controller.
"""Engine-vs-simulator cross-check.

For each congestion control, transport_test's flows cross a tbf bottleneck
between two network namespaces (tools/testbed/netns.sh); ccsim then
simulates that setup: one sender and one receiver host, the same flows,
rate, drop-tail queue, chunk size (one simulated packet per engine chunk),
the engine's controller and parameters, told the same line rate, its
paths (4, sprayed) and one controller per flow as the engine's default,
and the hosts' delay as transport_test measured it unloaded through the
testbed: a constant part as the hosts' link delay and the spread as host
jitter (host_jitter_us: exponential, so the one-way p50 and p99 of a
ping-pong, base + the mean of two draws, give the base and the mean).
Compared: throughput after the first second (the engine's from the
receiver's per-second rates), the bottleneck's average queue (the
engine's sampled from tc every 50 ms) and Jain's index over the flows.

Tolerances (stated, not tuned per run): throughput within 15%, average
queue within a factor of two or both under 32 KB, Jain's index within 0.1.
Where the engine's hosts cannot fill the bottleneck (with cc=none, which
sends all it can, they move under 90% of its rate or hold its queue under
a quarter full: CPU-bound hosts, e.g. two engines, tc and the sampling on
two cores, or 10 Gb/s from one engine), the link is not what sets the
rate or the queue, which the simulated hosts never are: throughput and
queue are then shown and marked "host-limited", not judged; Jain's index
still is.
Exit status: 0 every controller agrees, 1 one does not, 2 bad usage or
a run failed; 0 with a "skipped" line without root or iproute2.

  sudo tools/sim_crosscheck.py [--build=build] [--cc=timely_patched,swift]
                               [--rate_gbps=1] [--queue_kb=512]
                               [--duration_s=5] [--out=DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TB = "tools/testbed/netns.sh"
NAME = "ucclxc"


def sh(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def last_json(text, role):
    for line in reversed(text.splitlines()):
        if line.startswith("{") and f'"role":"{role}"' in line:
            return json.loads(line)
    return None


def engine_run(tt, flags, cc, duration_s, tmp):
    """One transport_test run across the testbed: (Gb/s at the receiver,
    average tc backlog in bytes, Jain's index, the chunk size the engine
    used); a run that never finishes (a stalled controller) counts as
    0 Gb/s."""
    args = [f"--flagfile={flags}", f"--duration_s={duration_s}", f"--cc={cc}",
            "--json", "--flow_stats"]
    srv = subprocess.Popen([TB, "exec", f"--name={NAME}", "b", tt, "--server",
                            "--device=udp:10.199.0.2"] + args,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    backlog = []
    cli = subprocess.Popen([TB, "exec", f"--name={NAME}", "a", tt,
                            "--serverip=10.199.0.2", "--device=udp:10.199.0.1"] + args,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + duration_s * 4 + 60
    while cli.poll() is None and time.time() < deadline:
        q = sh([TB, "qdisc", f"--name={NAME}", "a"]).stdout
        m = re.search(r"backlog (\d+)b", q)
        if m:
            backlog.append(int(m.group(1)))
        time.sleep(0.05)
    if cli.poll() is None:
        cli.kill()
    cout = cli.communicate()[0]
    try:
        sout = srv.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        srv.kill()
        sout = srv.communicate()[0]
    with open(os.path.join(tmp, f"engine_{cc}.log"), "w") as f:
        f.write(cout + "\n----- server -----\n" + sout)
    s = last_json(sout, "server")
    # Steady state, as the simulator's window: the receiver's per-second
    # rates after the first second.
    rates = [float(r) for t, r in re.findall(
        r"\[server\]\s+([0-9.]+)s\s+TX\s+[0-9.]+ Gb/s\s+RX\s+([0-9.]+) Gb/s", sout)
        if 1.0 < float(t) <= duration_s + 0.01]
    jain = re.findall(r"Jain's index ([0-9.]+)", cout)
    chunk = re.search(r"chunk (\d+) B", cout)
    if not chunk:
        return None
    # The first second is the start-up: the average is over the rest.
    steady = backlog[len(backlog) // max(duration_s, 1):] or backlog
    gbps = sum(rates) / len(rates) if rates else (s["rx_gbps"] if s else 0.0)
    return (gbps, sum(steady) / max(len(steady), 1),
            float(jain[-1]) if jain else float("nan"), int(chunk.group(1)))


def host_delay_us(tt, tmp):
    """The hosts' delay through the testbed, unloaded (transport_test lat):
    (constant one-way part, mean host jitter), or None. A one-way sample
    is half a round trip, base + (X1 + X2) / 2 with X exponential of mean
    m: its median is base + 0.839 m and its p99 base + 3.319 m."""
    args = ["--perftype=lat", "--msize=64", "--nflow=1", "--iterations=2000",
            "--json"]
    srv = subprocess.Popen([TB, "exec", f"--name={NAME}", "b", tt, "--server",
                            "--device=udp:10.199.0.2"] + args,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    cli = sh([TB, "exec", f"--name={NAME}", "a", tt, "--serverip=10.199.0.2",
              "--device=udp:10.199.0.1"] + args, timeout=120)
    srv.communicate(timeout=30)
    c = last_json(cli.stdout, "client")
    if not c:
        return None
    p50, p99 = c["lat_us"]["p50"], c["lat_us"]["p99"]
    m = max(p99 - p50, 0.0) / (3.319 - 0.839)
    return max(p50 - 0.839 * m, 0.0), m


def flags_of(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("--") and "=" in line:
            k, v = line[2:].split("=", 1)
            out[k] = v
    return out


def sim_run(ccsim, cc, flags, chunk, rate_gbps, queue_kb, duration_s, host,
            tmp):
    nflow = int(flags.get("nflow", "1"))
    link = float(flags.get("link_gbps", rate_gbps))
    # The engine's chunk (the software NIC caps it at one 9000-byte
    # datagram's payload) is one simulated packet; the rest of the
    # datagram (IP, UDP, the engine's header) is its header.
    header = max(9000 - chunk, 64)
    conf = "\n".join([
        f"name = crosscheck_{cc}",
        "description = the engine's setup across the netns testbed",
        f"cc = {cc}",
        "topology = dumbbell",
        "senders = 1",
        "receivers = 1",
        f"host_gbps = {max(10.0, 10 * rate_gbps)}",
        f"bottleneck_gbps = {rate_gbps}",
        f"cc_line_gbps = {link}",
        "link_delay_us = 0",
        f"host_delay_us = {host[0] / 2:.2f},{host[0] / 2:.2f}",
        f"host_jitter_us = {host[1]:.2f}",
        "multipath = spray",
        f"paths = {flags.get('paths', '4')}",
        "cc_per_path = 0",
        f"buffer_kb = {queue_kb}",
        f"mtu_bytes = {chunk}",
        f"chunk_bytes = {chunk}",
        f"header_bytes = {header}",
        f"ctrl_bytes = {header}",
        f"duration_ms = {duration_s * 1000}",
        f"jain_from_ms = {1000}",
        f"jain_to_ms = {duration_s * 1000}",
        "sample_us = 1000",
        "trace_flows = 0",
        "rto_init_us = 5000",
        "check.unfinished_flows = <= 0",
    ] + ["flow = 0 1 0 0" for _ in range(nflow)]) + "\n"
    path = os.path.join(tmp, f"sim_{cc}.conf")
    with open(path, "w") as f:
        f.write(conf)
    out = os.path.join(tmp, f"sim_{cc}")
    r = sh([ccsim, f"--config={path}", f"--out={out}", "--quiet"], timeout=600)
    with open(os.path.join(tmp, f"sim_{cc}.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    metrics = {}
    summary = os.path.join(out, f"crosscheck_{cc}__summary.csv")
    if not os.path.exists(summary):
        return None
    for line in open(summary).read().splitlines()[1:]:
        _, _, k, v = line.split(",")
        metrics[k] = float(v)
    return (metrics.get("window_tput_gbps", metrics.get("goodput_gbps", 0)),
            metrics.get("bottleneck_avg_queue_kb", 0) * 1024,
            metrics.get("jain", float("nan")))


def agree(eng, sim, host_limited):
    """(sim/engine throughput, throughput ok, queue ok, Jain ok); None for
    what is not judged because the hosts, not the link, limit the engine."""
    tput = sim[0] / eng[0] if eng[0] > 0 else float("inf")
    q_ok = (max(eng[1], sim[1]) < 32 * 1024 or
            (eng[1] > 0 and 0.5 <= sim[1] / eng[1] <= 2))
    jain_ok = abs(eng[2] - sim[2]) <= 0.1
    if host_limited:
        return tput, None, None, jain_ok
    return tput, 0.85 <= tput <= 1.15, q_ok, jain_ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--cc", default="timely_patched,swift,credit")
    ap.add_argument("--rate_gbps", type=float, default=1)
    ap.add_argument("--queue_kb", type=int, default=512)
    ap.add_argument("--duration_s", type=int, default=5)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    tt = os.path.join(a.build, "bin", "transport_test")
    ccsim = os.path.join(a.build, "bin", "ccsim")
    for b in (tt, ccsim):
        if not os.access(b, os.X_OK):
            print(f"sim_crosscheck: {b} not built (make)", file=sys.stderr)
            return 2
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("sim_crosscheck: skipped (needs root, ip and tc for the netns testbed)")
        return 0
    flags_path = f"configs/transport_test/netns_{a.rate_gbps:g}g.flags"
    if not os.path.exists(flags_path):
        print(f"sim_crosscheck: no {flags_path}", file=sys.stderr)
        return 2
    flags = flags_of(flags_path)
    tmp = a.out or tempfile.mkdtemp(prefix="uccl-xc.")
    os.makedirs(tmp, exist_ok=True)
    rate = f"{a.rate_gbps:g}gbit"
    up = [TB, "up", f"--name={NAME}", f"--rate={rate}", f"--queue_kb={a.queue_kb}"]
    if sh(up).returncode != 0:
        print("sim_crosscheck: testbed up failed", file=sys.stderr)
        return 2
    lines = []
    status = 0
    try:
        host = host_delay_us(tt, tmp)
        if host is None:
            print("sim_crosscheck: the latency run failed", file=sys.stderr)
            return 2
        # What the engine's hosts move with no controller: where it is
        # below the bottleneck, the hosts (CPU), not the link, are the limit,
        # which the simulator's hosts never are.
        sh(up)
        ceiling = engine_run(tt, flags_path, "none", a.duration_s, tmp)
        host_limited = ceiling is not None and (
            ceiling[0] < 0.9 * a.rate_gbps or ceiling[1] < a.queue_kb * 1024 / 4)
        lines += [f"Bottleneck {a.rate_gbps:g} Gb/s, {a.queue_kb} KiB drop-tail queue, "
                  f"{flags.get('nflow', '1')} flows, {a.duration_s} s; unloaded one-way delay "
                  f"{host[0]:.0f} us + host jitter of mean {host[1]:.0f} us "
                  "(the simulated hosts' link delay and host_jitter_us); "
                  "the engine with cc=none: "
                  + (f"{ceiling[0]:.3f} Gb/s, average queue {ceiling[1] / 1024:.0f} KB"
                     if ceiling else "failed") + ".", "",
                  "| cc | engine Gb/s | sim Gb/s | sim/engine | engine avg queue | "
                  "sim avg queue | engine Jain | sim Jain | verdict |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        if host_limited:
            lines[0] += (" With no controller the hosts move under 90% of the "
                         "bottleneck or fill under a quarter of its queue: they, "
                         "not the link, limit the engine, so throughput and "
                         "queue are shown, not judged (host-limited).")
        for cc in a.cc.split(","):
            sh(up)  # a fresh queue for each controller
            eng = engine_run(tt, flags_path, cc, a.duration_s, tmp)
            sim = None if eng is None else sim_run(
                ccsim, cc, flags, eng[3], a.rate_gbps, a.queue_kb, a.duration_s,
                host, tmp)
            if eng is None or sim is None:
                lines.append(f"| {cc} | run failed (logs in {tmp}) | | | | | | | FAIL |")
                status = 2
                continue
            ratio, t_ok, q_ok, j_ok = agree(eng, sim, host_limited)
            why = [n for n, ok in (("throughput", t_ok), ("queue", q_ok), ("Jain", j_ok))
                   if ok is False]
            verdict = "agree" if not why else "DISAGREE: " + ", ".join(why)
            if host_limited:
                verdict += " (host-limited: Jain only)"
            if why:
                status = max(status, 1)
            lines.append(f"| {cc} | {eng[0]:.3f} | {sim[0]:.3f} | {ratio:.2f} | "
                         f"{eng[1] / 1024:.0f} KB | {sim[1] / 1024:.0f} KB | "
                         f"{eng[2]:.3f} | {sim[2]:.3f} | {verdict} |")
    finally:
        sh([TB, "down", f"--name={NAME}"])
    report = "\n".join(lines) + "\n"
    print(report)
    with open(os.path.join(tmp, "CROSSCHECK.md"), "w") as f:
        f.write(report)
    print(f"logs and configs: {tmp}")
    return status


if __name__ == "__main__":
    sys.exit(main())
