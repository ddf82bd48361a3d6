#!/usr/bin/env bash
# `make demo`: the main job end to end on this machine.
#   1. start Kafka and Redis (unless already running) and apply the topics;
#   2. start an ASR worker and wait until it is ready (model loaded, partitions assigned);
#   3. publish two fixture calls in real time (stereo: agent + customer) while
#      `streamscribe tail` prints live partials and finals;
#   4. stop the worker (SIGTERM) and whatever the demo started.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=demo
# shellcheck source=scripts/demo_common.sh
source scripts/demo_common.sh
start_infra
start_worker
echo "demo: worker ready; publishing two calls in real time (about 30 s)"
echo

$STREAMSCRIBE tail &  # until the calls have ended (below)
tail_pid=$!
pids+=("$tail_pid")
$STREAMSCRIBE publish tests/fixtures/calls/call01_billing.flac --call-id "demo-$stamp-billing" \
  --realtime >"$RUN_DIR/publish1.log" 2>&1 &
pub1=$!
$STREAMSCRIBE publish tests/fixtures/calls/call03_outage.flac --call-id "demo-$stamp-outage" \
  --realtime >"$RUN_DIR/publish2.log" 2>&1 &
pub2=$!
failed=0
wait "$pub1" || { echo "demo: publishing call 1 failed; see $RUN_DIR/publish1.log" >&2; failed=1; }
wait "$pub2" || { echo "demo: publishing call 2 failed; see $RUN_DIR/publish2.log" >&2; failed=1; }
if [ "$failed" = 1 ]; then exit 1; fi
wait_for_sessions_ended 180 "demo-$stamp-billing=2" "demo-$stamp-outage=2"
sleep 2  # tail shows what the last transaction committed
kill -TERM "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true
echo
echo "demo: done. Metrics were at http://127.0.0.1:$STREAMSCRIBE_METRICS_PORT/metrics;"
echo "demo: stopping the worker$( [ "$started_kafka" = 1 ] && echo ", Kafka" )$( [ "$started_redis" = 1 ] && echo " and Redis" )."
