#!/usr/bin/env bash
# `make demo-call`: a phone call placed by baresip through the ingress gateway, transcribed live.
#   1. start Kafka and Redis (unless already running) and apply the topics;
#   2. start an ASR worker and the ingress gateway (SIP on 127.0.0.1:$SIP_PORT);
#   3. baresip dials sip:transcribe@127.0.0.1:$SIP_PORT, plays three recorded sentences
#      (tests/fixtures/telephone) as the call's audio and hangs up at the end of the file,
#      while `streamscribe tail` prints the partials and finals as they come;
#   4. stop what the demo started.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=demo-call
# shellcheck source=scripts/demo_common.sh
source scripts/demo_common.sh
SIP_PORT="${DEMO_SIP_PORT:-5060}"
start_infra
start_worker

echo "demo-call: starting the ingress gateway, SIP on 127.0.0.1:$SIP_PORT (log: $RUN_DIR/ingress.log)"
STREAMSCRIBE_INGRESS_AUTH_TOKEN="demo-$stamp" STREAMSCRIBE_INGRESS_BIND=127.0.0.1 \
  STREAMSCRIBE_INGRESS_PORT=0 STREAMSCRIBE_INGRESS_SIP_BIND=127.0.0.1 \
  STREAMSCRIBE_INGRESS_SIP_PORT="$SIP_PORT" STREAMSCRIBE_INGRESS_RTP_BIND=127.0.0.1 \
  STREAMSCRIBE_INGRESS_RTP_PORT_MIN=41000 STREAMSCRIBE_INGRESS_RTP_PORT_MAX=41019 \
  $STREAMSCRIBE ingress >"$RUN_DIR/ingress.log" 2>&1 &
ingress_pid=$!
pids+=("$ingress_pid")
wait_for "the gateway answering SIP" 30 grep -q "SIP on" "$RUN_DIR/ingress.log"

# The call's audio: three sentences with a second of silence after each, as a WAV (aufile).
sox -n -r 8000 -c 1 -b 16 "$RUN_DIR/pause.wav" trim 0 1
sox tests/fixtures/telephone/tel_utt01_account.flac "$RUN_DIR/pause.wav" \
  tests/fixtures/telephone/tel_utt03_delivery.flac "$RUN_DIR/pause.wav" \
  tests/fixtures/telephone/tel_utt08_cancel.flac "$RUN_DIR/pause.wav" \
  -b 16 -e signed-integer "$RUN_DIR/call.wav"
mkdir -p "$RUN_DIR/baresip"
cat >"$RUN_DIR/baresip/config" <<EOF
sip_listen 127.0.0.1:0
net_interface 127.0.0.1
audio_source aufile,$RUN_DIR/call.wav
audio_player aubridge,nowhere
audio_alert aubridge,nowhere
module_path /usr/lib/baresip/modules
module g711.so
module aufile.so
module aubridge.so
module_app account.so
module_app menu.so
EOF
echo "<sip:demo@127.0.0.1;regint=0>;audio_codecs=PCMU" >"$RUN_DIR/baresip/accounts"

$STREAMSCRIBE tail --idle-exit-s 180 &
tail_pid=$!
pids+=("$tail_pid")
echo "demo-call: baresip calls sip:transcribe@127.0.0.1:$SIP_PORT (log: $RUN_DIR/baresip.log)"
echo
baresip -f "$RUN_DIR/baresip" -e "/dial sip:transcribe@127.0.0.1:$SIP_PORT" \
  >"$RUN_DIR/baresip.log" 2>&1 &
baresip_pid=$!
pids+=("$baresip_pid")
# baresip hangs up (BYE) at the end of the file; the gateway then ends the call.
wait_for "the call ending" 60 grep -q "ended (BYE)" "$RUN_DIR/ingress.log"
kill -TERM "$baresip_pid" 2>/dev/null || true

call_id="$(sed -n 's/.*call \([^ ]*\) ended (BYE).*/\1/p' "$RUN_DIR/ingress.log" | tail -n 1)"
wait_for_sessions_ended 180 "$call_id=1"
sleep 2  # tail shows what that transaction committed
kill -TERM "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true
echo
echo "demo-call: done; the call's events (ingress_call_started, session_ended) are on asr.events."
