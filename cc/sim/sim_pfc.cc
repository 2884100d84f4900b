// The simulator's priority flow control (IEEE 802.1Qbb, one class for
// data): ingress accounting per link, PAUSE above XOFF, RESUME below XON.
#include "cc/sim/sim_core.h"

namespace uccl::sim::detail {

// Queues sit at egress ports; a lossless switch accounts each data packet
// to the link it came in on until it leaves. Over pfc_xoff_kb, the switch
// sends that link's sender a PAUSE (it arrives one propagation delay
// later, the sender finishes the packet on the wire); under pfc_xon_kb, a
// RESUME. A paused egress port backs its own queue up, whose ingress links
// pause theirs: congestion spreads hop by hop towards the senders, as in
// a RoCE fabric. Control packets (ACKs, credit) are another class and are
// never paused.
void Sim::pfc_ingress(const Packet& k) {
  Port& in = ports_[k.in_port];
  in.ingress_bytes += k.wire_bytes;
  if (!in.pause_sent && in.ingress_bytes > pfc_xoff_) {
    in.pause_sent = true;
    at(now_ + in.prop_ns, kEvPfc, k.in_port, 1);
  }
}

void Sim::pfc_egress(const Packet& k) {
  Port& in = ports_[k.in_port];
  in.ingress_bytes -= std::min<uint64_t>(in.ingress_bytes, k.wire_bytes);
  if (in.pause_sent && in.ingress_bytes < pfc_xon_) {
    in.pause_sent = false;
    at(now_ + in.prop_ns, kEvPfc, k.in_port, 0);
  }
}

void Sim::pfc_frame(uint32_t port, bool pause) {
  Port& p = ports_[port];
  if (pause == p.paused) return;
  p.paused = pause;
  if (pause) {
    ++p.pauses;
    p.paused_since = now_;
    return;
  }
  p.paused_ns += now_ - p.paused_since;
  if (!p.busy) try_transmit(port);
}

}  // namespace uccl::sim::detail
