#!/usr/bin/env python3
"""Mutation checks: the test suite must fail when a mechanism breaks.

Each mutant is a small change to one source file (a check removed, a
formula altered, a fault injector that does nothing). For each, in a
scratch copy of the tree (the working tree is never touched), the
mutation is applied, the test binary that should notice is rebuilt and
run with the tests named, and the mutant must be "killed": some test
fails. Prints a table (mutant, tests run, verdict); exits 1 if any
mutant survives.

  tools/mutants.py [--scratch DIR] [--only NAME[,NAME]] [--list] [--check]

The first run builds the scratch tree (minutes); later runs rebuild only
what each mutation touches. `make mutants` runs it.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, file, original text (exactly once), mutated text, binary, filter
MUTANTS = [
    ("injector-does-nothing", "transport/fault/fault_injector.cc",
     "  ++c.packets;\n",
     "  ++c.packets;\n  if (now_ns != ~0ull) return out;\n",
     "engine_tests", "Faults/FaultTest.*:Modes/EagerMix*"),
    ("sequence-nak-ignored", "transport/udp/soft_qp_rc.cc",
     "    case AckSyndrome::kNakSequence:\n      rewind_to(about);\n",
     "    case AckSyndrome::kNakSequence:\n",
     "transport_tests", "GoBackN*"),
    ("nak-window-check-removed", "transport/udp/soft_qp_rc.cc",
     "  if (syn != AckSyndrome::kAck && !about_outstanding) {",
     "  if (false && syn != AckSyndrome::kAck && !about_outstanding) {",
     "transport_tests", "ForgedNak*"),
    ("ack-psn-window-check-removed", "transport/udp/soft_qp_rc.cc",
     "  if (psn_lt(acked_psn_, ack) && psn_lt(ack, next_psn_)) {",
     "  if (psn_lt(acked_psn_, ack)) {",
     "transport_tests", "ForgedNak*"),
    ("source-check-removed", "transport/udp/soft_qp_rx.cc",
     "  if (!from_peer(from)) {\n    ++dev_->counters_.drop_wrong_source;",
     "  if (false) {\n    ++dev_->counters_.drop_wrong_source;",
     "transport_tests", "ForgedNak*:ForgedUc*"),
    ("header-crc-check-skipped", "transport/udp/soft_device_rx.cc",
     "  if (crc32c(0, &z, sizeof(z)) != h.hdr_crc) return &counters_.drop_bad_crc;",
     "  if (crc32c(0, &z, sizeof(z)) != h.hdr_crc && false) return nullptr;",
     "transport_tests", "HostileInput*"),
    ("rack-disabled", "cc/scoreboard.cc",
     "  if (!newest_delivery(&newest)) return 0;",
     "  if (true) return 0;",
     "engine_tests", "FastRetransmit*"),
    ("rack-same-loop-tie-ignored", "cc/recovery.h",
     "  return t1 < t2 || (t1 == t2 && static_cast<int32_t>(seq1 - seq2) < 0);",
     "  return t1 < t2 || (false && static_cast<int32_t>(seq1 - seq2) < 0);",
     "engine_tests", "FastRetransmit*"),
    ("tlp-disabled", "cc/scoreboard.cc",
     "  if (!cfg_.tail_loss_probe || tlp_sent_",
     "  if (true || tlp_sent_",
     "engine_tests", "TailLossProbe*"),
    ("sack-off-by-one", "engine/engine_ack.cc",
     "const uint32_t s = a.cum_ack + 1 + k * 64 + __builtin_ctzll(bits);",
     "const uint32_t s = a.cum_ack + 2 + k * 64 + __builtin_ctzll(bits);",
     "engine_tests", "FastRetransmit*"),
    ("sack-built-off-by-one", "engine/rx_window.h",
     "      if (at(rcv_cum_ + 1 + i).valid) a->sack[i / 64] |= 1ull << (i % 64);",
     "      if (at(rcv_cum_ + 2 + i).valid) a->sack[i / 64] |= 1ull << (i % 64);",
     "engine_tests", "RxWindow.*"),
    ("rx-duplicate-handed-on", "engine/rx_window.h",
     "    return delta >= kMaxChunksInFlight || at(rcv_cum_ + delta).valid;",
     "    return delta >= kMaxChunksInFlight;",
     "engine_tests", "RxWindow.*"),
    ("dup-trigger-stale", "engine/rx_window.h",
     "    ack_now_ = true;\n    set_trigger(csn, arrival_ns, now, busy_from_ns);\n    return false;",
     "    ack_now_ = true;\n    (void)csn;\n    (void)arrival_ns;\n    (void)now;\n    (void)busy_from_ns;\n    return false;",
     "engine_tests", "RxWindow.*"),
    ("rc-timeout-capped-at-configured", "transport/udp/soft_qp_tx.cc",
     "    base = std::max(min_rto_ns_, srtt_ns_ + 4 * rttvar_ns_);",
     "    base = std::min(base, std::max(min_rto_ns_, srtt_ns_ + 4 * rttvar_ns_));",
     "transport_tests", "RcReliabilityTest.*"),
    ("frto-off", "cc/scoreboard.cc",
     "  if (rto_backoff_ == 0) {\n    // F-RTO",
     "  if (false) {\n    // F-RTO",
     "engine_tests", "SpuriousTimeout*"),
    ("frto-resend-timed-by-min-rtt", "cc/scoreboard.cc",
     "  if (frto_ && seq == frto_seq_ && s.retx > 0) {",
     "  if (frto_ && seq == frto_seq_ && s.retx > 0 &&\n"
     "      rack_unambiguous(true, s.last_tx_ns, min_rtt_ns_, now)) {",
     "scoreboard_tests", "Scoreboard.*"),
    ("frto-real-loss-rack-not-advanced", "cc/scoreboard.cc",
     "    const SegRec& p = seg(frto_seq_);\n    if (now > p.last_tx_ns) {",
     "    const SegRec& p = seg(frto_seq_);\n    if (false) {",
     "scoreboard_tests", "Scoreboard.*"),
    ("rack-ambiguity-full-min-rtt", "cc/recovery.h",
     "  return !(retransmitted && now_ns - last_tx_ns < min_rtt_ns / 4 * 3);",
     "  return !(retransmitted && now_ns - last_tx_ns < min_rtt_ns);",
     "scoreboard_tests", "Scoreboard.*"),
    ("rack-one-clock-for-all-paths", "cc/scoreboard.cc",
     "    rack_tx_ns_[s.path] = s.last_tx_ns;\n    rack_seq_[s.path] = seq;\n    rack_rtt_ns_[s.path] = now - s.last_tx_ns;",
     "    for (size_t q = 0; q < rack_tx_ns_.size(); ++q) {\n      rack_valid_[q] = 1;\n      rack_tx_ns_[q] = s.last_tx_ns;\n      rack_seq_[q] = seq;\n      rack_rtt_ns_[q] = now - s.last_tx_ns;\n    }",
     "scoreboard_tests", "Table/*"),
    ("engine-window-off", "engine/engine_tx.cc",
     "    if (cfg_.window_bytes > 0 &&",
     "    if (false && cfg_.window_bytes > 0 &&",
     "engine_tests", "EngineWindow*"),
    ("rto-backoff-removed", "cc/recovery.cc",
     "  return std::min(max_ns_, rto_ns_ << backoff);",
     "  return std::min(max_ns_, rto_ns_);",
     "ccsim_tests", "Recovery*"),
    ("eifel-response-removed", "cc/recovery.cc",
     "  srtt_ns_ = std::max(srtt_ns_, rtt_ns);\n",
     "",
     "ccsim_tests", "Recovery*"),
    ("swift-md-always-max", "cc/swift.cc",
     "      double f = std::max(1 - p_.beta * (delay_us - target_us) / delay_us,\n"
     "                          1 - p_.max_mdf);",
     "      double f = 1 - p_.max_mdf;",
     "cc_tests", "Swift*"),
    ("swift-target-over-cwnd", "cc/swift.cc",
     "  double fs = fs_alpha_ / std::sqrt(fcwnd_) + fs_beta_;",
     "  double fs = fs_alpha_ / fcwnd_ + fs_beta_;",
     "cc_tests", "Swift*"),
    ("timely-patched-weight", "cc/timely.cc",
     "                                        : 2 * gradient + 0.5;",
     "                                        : gradient + 0.5;",
     "cc_tests", "TimelyPatched*"),
    ("credit-grants-doubled", "cc/credit.cc",
     "    tokens_ -= g;",
     "    tokens_ -= g / 2;",
     "cc_tests", "Credit*"),
    ("bootstrap-ready-byte-unchecked", "engine/bootstrap.cc",
     "  if (in_[0] != kBootReady) return fail(ProtocolError(\"bad ready byte\"));",
     "  if (false) return fail(ProtocolError(\"bad ready byte\"));",
     "engine_tests", "Live/BootstrapDamage.*"),
    ("bootstrap-rejects-returned", "engine/endpoint_conn.cc",
     "    if (!st.ok() && !h->identified()) {",
     "    if (false && !st.ok() && !h->identified()) {",
     "engine_tests", "BootstrapTest.*"),
    ("fifo-phase-of-word0-only", "channels/fifo.h",
     "      if ((w[k] & device::kPhaseBit) != phase) return false;",
     "      if (k == 0 && (w[k] & device::kPhaseBit) != phase) return false;",
     "channels_tests", "TriggerFifo.*"),
    ("inline-does-not-hold-eager-back", "engine/engine_tx.cc",
     "  if (tx.inline_outstanding) return false;",
     "  if (false && tx.inline_outstanding) return false;",
     "engine_tests", "InlineTest.*"),
    ("held-ack-never-carried", "transport/udp/soft_qp_tx.cc",
     "    if (type_ == QpType::kRC && ack_held_until_ns_ != 0) {",
     "    if (false && ack_held_until_ns_ != 0) {",
     "transport_tests", "RcAckCoalescing*"),
    ("held-acks-never-stop", "transport/udp/soft_qp_rc.cc",
     "  hold_acks_ = false;  // no reply in time: ACK at once from now on",
     "",
     "transport_tests", "RcAckCoalescing*"),
    ("soft-nic-lists-grow-on-datapath", "transport/udp/soft_device.cc",
     "  pending_.reserve(qps_.size());\n  later_.reserve(qps_.size());\n"
     "  rc_armed_.reserve(qps_.size());\n  acks_held_.reserve(qps_.size());\n",
     "",
     "engine_alloc_tests", "Kinds/HotPathAllocTest.*"),
    ("plugin-isend-builds-a-string", "collective/net_plugin_data.cc",
     "  if (size > max_bytes_) {",
     "  const std::string what = \"isend of \" + std::to_string(size) + \" B\";\n"
     "  if (size > max_bytes_ && !what.empty()) {",
     "plugin_alloc_tests", "PluginAllocTest.NcclSteps*"),
    ("channel-signal-overtakes-writes", "channels/proxy.cc",
     "    if ((held_signal || op.kind == MsgKind::kFlush) && !c.writes.empty()) {",
     "    if ((held_signal || op.kind == MsgKind::kFlush) && false) {",
     "channels_tests", "ChannelWrites.*"),
    ("channel-put-signal-overtakes-writes", "channels/proxy.cc",
     "(op.flags & kSignalAfter) &&\n                    !c.writes.empty();",
     "false;",
     "channels_tests", "ChannelWrites.APutsSignal*"),
    ("auto-engines-leave-no-cpu", "collective/stripe.h",
     "  const int engines = std::min(share * 3 / 4, share - 2);",
     "  const int engines = share * 3 / 4;",
     "collective_tests", "AutoEngines.*"),
    ("credit-probe-never", "engine/engine_tx.cc",
     "    if (pacer_) probe_credit(c, now);",
     "    if (false) probe_credit(c, now);",
     "engine_tests", "CcEnforcementTest.ALostGrant*"),
    ("notify-every-chunk", "engine/engine_rx.cc",
     "    if (info.last)\n      c->rec->writes_landed",
     "    if (true)\n      c->rec->writes_landed",
     "engine_tests", "WriteNotifyTest.*"),
    ("priority-rx-after-data", "transport/udp/soft_device_rx.cc",
     "  if (prio_fd_ >= 0) {\n    for (int done = 0; done < rx_budget_;) {",
     "  if (false) {\n    for (int done = 0; done < rx_budget_;) {",
     "transport_tests", "PriorityRx.*"),
    ("rx-budget-counts-buffers", "transport/udp/soft_device_rx.cc",
     "    taken += static_cast<int>(k);",
     "    taken += 1;",
     "transport_tests", "*Gro*"),
    ("channel-signal-not-held-for-landing", "channels/proxy_rx.cc",
     "      if (!*landed) {  // it waits, and the messages after it",
     "      if (false) {",
     "channels_tests", "ChannelWrites.*"),
    ("write-mark-one-part-short", "p2p/transfers.cc",
     "    if (k < mark.parts[j]) return false;",
     "    if (k + 1 < mark.parts[j]) return false;",
     "p2p_tests", "P2p.AWriteMark*"),
    ("rx-guard-not-asked", "transport/udp/soft_nic.h",
     "    return cfg_.rx_guard == nullptr ||",
     "    return true ||",
     "transport_tests", "*RxGuard*"),
    ("rx-guard-not-asked-at-peek", "transport/udp/soft_qp_rx.cc",
     "    if (!guard_admits(h)) return nullptr;  // staged: on_uc() drops it",
     "",
     "transport_tests", "*RxGuard*"),
    ("chunk-guard-admits-copies", "engine/engine_rx.cc",
     "  return c != nullptr &&\n         !c->rx.win.holds_csn(f.tagged ? f.tag : c->rx.win.extend(i.csn));",
     "  return c != nullptr;",
     "engine_tests", "WriteNotifyTest.*"),
    ("chunk-guard-ignores-tag", "engine/engine_rx.cc",
     "!c->rx.win.holds_csn(f.tagged ? f.tag : c->rx.win.extend(i.csn));",
     "!c->rx.win.holds_csn(c->rx.win.extend(i.csn));",
     "engine_tests", "WriteNotifyTest.*"),
    ("complete-before-resend-leaves", "engine/engine_tx.cc",
     "!m.done && (!m.eager || m.paid) && m.resends_in_nic == 0;",
     "!m.done && (!m.eager || m.paid);",
     "engine_tests", "ResendLifetimeTest.*"),
    ("lone-chunk-send-call-as-fabric", "engine/engine_ack.cc",
     "s.fabric_delay_ns = rest - std::min<uint64_t>(tx.chunk(t).send_call_ns, rest);",
     "s.fabric_delay_ns = rest;",
     "engine_tests", "CcInputsTest.*"),
    ("endpoint-delay-counts-handling", "engine/rx_window.h",
     "now > trigger_taken_ns_ ? now - trigger_taken_ns_ : 0;",
     "uint64_t{0};",
     "engine_tests", "RxWindow.*"),
    ("measured-fabric-zero-reads-rtt", "cc/cc.h",
     "return delay_split ? fabric_delay_ns : rtt_ns;",
     "return fabric_delay_ns ? fabric_delay_ns : rtt_ns;",
     "cc_tests", "*FabricDelayOfZero*"),
    ("chunk-guard-trusts-contradicting-tag", "engine/engine_rx.cc",
     "  if (tag_contradicts(f, i)) return false;\n",
     "",
     "engine_tests", "HostilePeerTest.*"),
    ("holds-csn-forgets-wrap", "engine/rx_window.h",
     "    return csn - rcv_cum_ >= kMaxChunksInFlight || at(csn).valid;",
     "    return at(csn).valid;",
     "engine_tests", "RxWindow.*"),
    ("soft-nic-drops-guard-tag", "transport/udp/soft_qp.cc",
     "    e.tagged = wr->tagged && op == WrOpcode::kWriteWithImm;",
     "    e.tagged = false;",
     "transport_tests", "*RxGuard*"),
    ("priority-rx-wait-data-only", "transport/udp/soft_nic.h",
     "return wait_fd_ >= 0 ? wait_fd_ : fd_;",
     "return fd_;",
     "transport_tests", "PriorityRx.*"),
    ("gso-runs-ignore-destination", "transport/udp/tx_batch.cc",
     "         dest_[a].sin_port == dest_[b].sin_port;",
     "         true;",
     "transport_tests", "TxBatchTest.*:*Gso*:*Gro*"),
    ("gso-last-not-shorter", "transport/udp/tx_batch.cc",
     "      if (len_[end++] < seg) break;",
     "      ++end;",
     "transport_tests", "TxBatchTest.*:*Gso*:*Gro*"),
    ("gro-buffer-taken-whole", "transport/udp/soft_device_rx.cc",
     "  if (seg == 0 || seg >= len) {",
     "  if (true) {",
     "transport_tests", "TxBatchTest.*:*Gso*:*Gro*"),
    ("p2p-accepts-unplaced", "p2p/connections.cc",
     "data ? kDataConnTag + r * kMaxStripes + j : kNotifConnTag + r,",
     "data ? 0 * r : 0,",
     "p2p_tests", "P2p.*Engines*"),
]


def run(cmd, cwd, timeout=None, quiet=True):
    return subprocess.run(cmd, cwd=cwd, timeout=timeout, text=True,
                          stdout=subprocess.PIPE if quiet else None,
                          stderr=subprocess.STDOUT if quiet else None)


def tree_files():
    """The tree's source files where git cannot list them: everything but
    build outputs, hidden folders and carried binaries."""
    out = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if not (x.startswith((".", "build", "gpu_"))
                                           or x in ("__pycache__", "results"))]
        out += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    return out


def sync_tree(scratch):
    """Copies the tracked and untracked (not ignored) files to scratch/src."""
    src = os.path.join(scratch, "src")
    try:
        files = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
            capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        files = tree_files()  # a copy of the tree without git
    for f in files:
        if not f or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        dst = os.path.join(src, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        a = os.path.join(ROOT, f)
        if (not os.path.exists(dst) or
                os.path.getmtime(dst) < os.path.getmtime(a) or
                open(a, "rb").read() != open(dst, "rb").read()):
            shutil.copy2(a, dst)
    return src


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scratch", default="/tmp/uccl-mutants")
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="only check that every mutation applies to this "
                         "tree (its text is in its file exactly once)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    todo = MUTANTS
    if a.only:
        names = set(a.only.split(","))
        todo = [m for m in MUTANTS if m[0] in names]
        unknown = names - {m[0] for m in MUTANTS}
        if unknown:
            ap.error("unknown mutants: " + ", ".join(sorted(unknown)))
    if a.list:
        for m in todo:
            print(f"{m[0]:32s} {m[1]:36s} {m[4]} --gtest_filter={m[5]}")
        return 0
    if a.check:
        bad = [m[0] for m in todo
               if open(os.path.join(ROOT, m[1])).read().count(m[2]) != 1]
        for name in bad:
            print(f"mutant {name}: its text is not in its file exactly once",
                  file=sys.stderr)
        print(f"{len(todo) - len(bad)} of {len(todo)} mutations apply")
        return 1 if bad else 0
    os.makedirs(a.scratch, exist_ok=True)
    src = sync_tree(a.scratch)
    build = os.path.join(a.scratch, "build")
    # Check every mutation applies before spending a build on any.
    for name, path, old, new, _, _ in todo:
        text = open(os.path.join(src, path)).read()
        if text.count(old) != 1:
            print(f"mutant {name}: the text to mutate is not in {path} "
                  f"exactly once (update tools/mutants.py)", file=sys.stderr)
            return 2
    r = run(["cmake", "-S", src, "-B", build, "-DUCCL_CUDA=OFF"], ROOT)
    if r.returncode != 0:
        print(r.stdout, file=sys.stderr)
        return 2
    rows = []
    for name, path, old, new, binary, filt in todo:
        f = os.path.join(src, path)
        text = open(f).read()
        t0 = time.time()
        try:
            open(f, "w").write(text.replace(old, new))
            b = run(["cmake", "--build", build, "-j", str(a.jobs), "--target",
                     binary], ROOT)
            if b.returncode != 0:  # a mutant must compile to test anything
                verdict = "INVALID (does not compile)"
            else:
                try:
                    t = run([os.path.join(build, "bin", binary),
                             f"--gtest_filter={filt}"], ROOT, timeout=600)
                    verdict = ("killed" if t.returncode != 0 else "SURVIVED")
                except subprocess.TimeoutExpired:
                    verdict = "killed (tests timed out)"
        finally:
            open(f, "w").write(text)
        rows.append((name, path, binary, filt, verdict, time.time() - t0))
        print(f"{name}: {verdict} ({time.time() - t0:.0f} s)", flush=True)
    # Rebuild the pristine binaries so the scratch tree is clean next time.
    for binary in sorted({m[4] for m in todo}):
        run(["cmake", "--build", build, "-j", str(a.jobs), "--target",
             binary], ROOT)
    print("\n| mutant | file | killed by | verdict |")
    print("|---|---|---|---|")
    for name, path, binary, filt, verdict, _ in rows:
        print(f"| {name} | `{path}` | `{binary} --gtest_filter={filt}` | "
              f"{verdict} |")
    bad = [r for r in rows if not r[4].startswith("killed")]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} mutants killed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
