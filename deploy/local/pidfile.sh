# Sourced by kafka.sh and redis.sh: pid files that are trusted only for our own process.

# pidfile_alive FILE PATTERN: the PID in FILE runs and its command line matches PATTERN (a PID
# reused by another process after a reboot is neither trusted nor killed).
pidfile_alive() {
  [ -f "$1" ] || return 1
  local pid
  pid="$(cat "$1")"
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}
