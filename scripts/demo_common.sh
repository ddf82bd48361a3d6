# Sourced by the demo scripts (scripts/demo.sh, scripts/demo_call.sh): what every demo does
# around its own story. Before sourcing, set DEMO (the name in messages and in the run folder).
#   - RUN_DIR: the demo's logs, under the cache;
#   - cleanup on exit: every pid in `pids` gets SIGTERM, and Kafka and Redis are stopped if
#     this demo started them;
#   - start_infra: Kafka and Redis unless already running, then the topics;
#   - start_worker: an ASR worker, waited for until /readyz answers (its log's tail if not).
STREAMSCRIBE=.venv/bin/streamscribe
RUN_DIR="${STREAMSCRIBE_CACHE:-$HOME/.cache/streamscribe}/$DEMO"
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

wait_for() {  # wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds
  local what="$1" seconds="$2"
  shift 2
  for _ in $(seq 1 "$seconds"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  echo "$DEMO: $what did not happen in $seconds s (logs: $RUN_DIR)" >&2
  exit 1
}

start_infra() {
  if ! bash deploy/local/kafka.sh status >/dev/null 2>&1; then
    started_kafka=1  # before `up`: a start that fails half-way is stopped too
    bash deploy/local/kafka.sh up
  fi
  if ! bash deploy/local/redis.sh status >/dev/null 2>&1; then
    started_redis=1
    bash deploy/local/redis.sh up
  fi
  $STREAMSCRIBE topics apply
}

start_worker() {  # an ASR worker, ready (model loaded, partitions assigned) within 180 s
  echo "$DEMO: starting an ASR worker (log: $RUN_DIR/worker.log)"
  $STREAMSCRIBE worker --worker-id "$DEMO-$stamp" >"$RUN_DIR/worker.log" 2>&1 &
  local worker_pid=$!
  pids+=("$worker_pid")
  for _ in $(seq 1 180); do
    if curl -fs "http://127.0.0.1:$STREAMSCRIBE_METRICS_PORT/readyz" >/dev/null 2>&1; then
      break
    fi
    if ! kill -0 "$worker_pid" 2>/dev/null; then
      echo "$DEMO: the worker exited; last lines of its log:" >&2
      tail -n 20 "$RUN_DIR/worker.log" >&2
      exit 1
    fi
    sleep 1
  done
  curl -fs "http://127.0.0.1:$STREAMSCRIBE_METRICS_PORT/readyz" >/dev/null || {
    echo "$DEMO: the worker did not become ready in 180 s; see $RUN_DIR/worker.log" >&2
    exit 1
  }
  if ! kill -0 "$worker_pid" 2>/dev/null; then  # the answer came from another process on the port
    echo "$DEMO: the worker exited (port $STREAMSCRIBE_METRICS_PORT taken?); its log:" >&2
    tail -n 20 "$RUN_DIR/worker.log" >&2
    exit 1
  fi
}

wait_for_sessions_ended() {  # wait_for_sessions_ended SECONDS CALL_ID=CHANNELS...
  # Until every call has had CHANNELS session_ended events on asr.events: the worker commits
  # that event with the call's last final, so everything the call said has been published.
  .venv/bin/python - "$@" <<'PY' || { echo "$DEMO: the calls did not end in $1 s (logs: $RUN_DIR)" >&2; exit 1; }
import sys, time, uuid
from collections import Counter
import orjson
from confluent_kafka import Consumer
from pipeline.settings import load_settings
from pipeline.topics import TopicRole, topic_name
seconds, wanted = float(sys.argv[1]), {}
for arg in sys.argv[2:]:
    call_id, _, channels = arg.rpartition("=")
    wanted[call_id.encode()] = int(channels)
kafka = load_settings().kafka
consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"demo-{uuid.uuid4().hex}",
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
consumer.subscribe([topic_name(TopicRole.EVENTS, kafka.topic_prefix)])
ended, deadline = Counter(), time.monotonic() + seconds
try:
    while time.monotonic() < deadline:
        for message in consumer.consume(num_messages=500, timeout=0.5):
            if message.error() is None and message.key() in wanted:
                if orjson.loads(message.value())["type"] == "session_ended":
                    ended[message.key()] += 1
        if all(ended[key] >= channels for key, channels in wanted.items()):
            sys.exit(0)
    sys.exit(1)
finally:
    consumer.close()
PY
}
