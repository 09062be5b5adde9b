#!/usr/bin/env bash
# tests/slurm/lab/down.sh: stop what up.sh started, by the PIDs it recorded (never by name).
#
#   sudo tests/slurm/lab/down.sh [-d DIR] [--purge]
#
# Jobs are cancelled first (Slurm cleans up its own steps), then each node's slurmd and any
# process still in that node's UTS namespace, then slurmctld, slurmdbd, MariaDB and the munged
# up.sh started (a munged it found running is left alone). --purge also removes DIR, the
# /etc/hosts block and the configs up.sh wrote to /etc/slurm (putting back what it moved aside).
set -euo pipefail

DIR=${NODERUN_LAB_DIR:-/tmp/noderun-slurm-lab}
PURGE=0
while [ $# -gt 0 ]; do
  case $1 in
    -d) DIR=$2; shift 2 ;;
    --purge) PURGE=1; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "down.sh: unknown option $1 (see $0 --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "down.sh: run as root" >&2; exit 1; }
TAG="# noderun test lab (tests/slurm/lab/up.sh)"

running() { [ -n "${1:-}" ] && [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
gone_within() {  # gone_within SECONDS PID...
  local until=$((SECONDS + $1)) pid; shift
  while :; do
    local left=0; for pid in "$@"; do running "$pid" && left=1; done
    [ $left = 0 ] && return 0
    [ $SECONDS -lt $until ] || return 1
    sleep 0.2
  done
}
stop() {  # stop NAME: the recorded PID, if it still runs that program (PID reuse guard)
  local file=$DIR/pids/$1.pid pid
  [ -e "$file" ] || return 0
  pid=$(cat "$file")
  if running "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "${1%%-*}" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    if ! gone_within 20 "$pid"; then
      echo "down.sh: $1 ($pid) outlived SIGTERM by 20 s; SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      gone_within 5 "$pid" || true
    fi
    echo "stopped $1 ($pid)"
  fi
  rm -f "$file"
}

if [ -d "$DIR/pids" ]; then
  if [ -e "$DIR/pids/slurmctld.pid" ] && running "$(cat "$DIR/pids/slurmctld.pid")"; then
    jobs=$(squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      echo "cancelling jobs: $(echo $jobs)"
      scancel $jobs 2>/dev/null || true
      until=$((SECONDS + 15))
      while [ -n "$(squeue -h 2>/dev/null)" ] && [ $SECONDS -lt $until ]; do sleep 0.3; done
    fi
  fi
  for f in "$DIR"/pids/slurmd-*.pid; do [ -e "$f" ] && stop "$(basename "$f" .pid)"; done
  mine=$(readlink /proc/self/ns/uts)
  for f in "$DIR"/pids/slurmd-*.uts; do
    [ -e "$f" ] || continue
    ns=$(cat "$f"); rm -f "$f"
    [ -n "$ns" ] && [ "$ns" != "$mine" ] || continue
    left=()
    for p in /proc/[0-9]*; do [ "$(readlink "$p/ns/uts" 2>/dev/null)" = "$ns" ] && left+=("${p#/proc/}"); done
    if [ ${#left[@]} -gt 0 ]; then
      echo "stopping what is left in $(basename "$f" .uts)'s namespace: ${left[*]}"
      kill -TERM "${left[@]}" 2>/dev/null || true
      gone_within 5 "${left[@]}" || kill -KILL "${left[@]}" 2>/dev/null || true
    fi
  done
  for name in slurmctld slurmdbd mariadbd munged; do stop $name; done
  status=0
  for f in "$DIR"/pids/*.pid; do
    [ -e "$f" ] || continue
    running "$(cat "$f")" && { echo "down.sh: still running: $(basename "$f" .pid) ($(cat "$f"))" >&2; status=1; }
  done
  [ $status = 0 ] || exit 1
  echo "the lab is down"
else
  echo "no lab recorded in $DIR; nothing to stop"
fi

if [ $PURGE = 1 ]; then
  [ -e "$DIR/.noderun-lab" ] && rm -rf "$DIR"
  for f in slurm.conf slurmdbd.conf gres.conf; do
    if [ -e /etc/slurm/$f ] && head -n1 /etc/slurm/$f | grep -qF "$TAG"; then rm -f /etc/slurm/$f; fi
    [ -e /etc/slurm/$f.before-noderun-lab ] && mv /etc/slurm/$f.before-noderun-lab /etc/slurm/$f
  done
  if grep -q '^# noderun-slurm-lab begin$' /etc/hosts; then
    kept=$(sed '/^# noderun-slurm-lab begin$/,/^# noderun-slurm-lab end$/d' /etc/hosts)
    printf '%s\n' "$kept" > /etc/hosts
  fi
  echo "purged $DIR, the lab's /etc/slurm files and its /etc/hosts block"
fi
