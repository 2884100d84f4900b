#!/usr/bin/env bash
# `make experiments`: the congestion-control experiments on the cc/ simulator.
# The simulator and its experiment configs are not written yet (issue 5).
echo "make experiments: the cc/ discrete-event simulator is not built yet;" >&2
echo "meanwhile tools/bench_transport.sh runs each CC through the netns testbed." >&2
exit 2
