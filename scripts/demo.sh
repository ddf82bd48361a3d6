#!/usr/bin/env bash
# `make demo`: the main job end to end on this machine.
#   1. start Kafka and Redis (unless already running) and apply the topics;
#   2. start an ASR worker and wait until it is ready (model loaded, partitions assigned);
#   3. publish two fixture calls in real time (stereo: agent + customer) while
#      `streamscribe tail` prints live partials and finals;
#   4. stop the worker (SIGTERM) and whatever the demo started.
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMSCRIBE=.venv/bin/streamscribe
RUN_DIR="${STREAMSCRIBE_CACHE:-$HOME/.cache/streamscribe}/demo"
mkdir -p "$RUN_DIR"
export STREAMSCRIBE_METRICS_PORT="${STREAMSCRIBE_METRICS_PORT:-9400}"
stamp="$(date +%H%M%S)"
started_kafka=0
started_redis=0
pids=()

cleanup() {
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  if [ "$started_kafka" = 1 ]; then bash deploy/local/kafka.sh down; fi
  if [ "$started_redis" = 1 ]; then bash deploy/local/redis.sh down; fi
}
trap cleanup EXIT

if ! bash deploy/local/kafka.sh status >/dev/null 2>&1; then
  started_kafka=1  # before `up`: a start that fails half-way is stopped too
  bash deploy/local/kafka.sh up
fi
if ! bash deploy/local/redis.sh status >/dev/null 2>&1; then
  started_redis=1
  bash deploy/local/redis.sh up
fi
$STREAMSCRIBE topics apply

echo "demo: starting an ASR worker (log: $RUN_DIR/worker.log)"
$STREAMSCRIBE worker --worker-id "demo-$stamp" >"$RUN_DIR/worker.log" 2>&1 &
worker_pid=$!
pids+=("$worker_pid")
for _ in $(seq 1 180); do
  if curl -fs "http://127.0.0.1:$STREAMSCRIBE_METRICS_PORT/readyz" >/dev/null 2>&1; then
    break
  fi
  if ! kill -0 "$worker_pid" 2>/dev/null; then
    echo "demo: the worker exited; last lines of its log:" >&2
    tail -n 20 "$RUN_DIR/worker.log" >&2
    exit 1
  fi
  sleep 1
done
curl -fs "http://127.0.0.1:$STREAMSCRIBE_METRICS_PORT/readyz" >/dev/null || {
  echo "demo: the worker did not become ready in 180 s; see $RUN_DIR/worker.log" >&2
  exit 1
}
if ! kill -0 "$worker_pid" 2>/dev/null; then  # the answer came from another process on the port
  echo "demo: the worker exited (port $STREAMSCRIBE_METRICS_PORT taken?); its log:" >&2
  tail -n 20 "$RUN_DIR/worker.log" >&2
  exit 1
fi
echo "demo: worker ready; publishing two calls in real time (about 30 s)"
echo

$STREAMSCRIBE tail --idle-exit-s 15 &
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
wait "$tail_pid" || { echo "demo: streamscribe tail failed" >&2; failed=1; }
if [ "$failed" = 1 ]; then exit 1; fi
echo
echo "demo: done. Metrics were at http://127.0.0.1:$STREAMSCRIBE_METRICS_PORT/metrics;"
echo "demo: stopping the worker$( [ "$started_kafka" = 1 ] && echo ", Kafka" )$( [ "$started_redis" = 1 ] && echo " and Redis" )."
