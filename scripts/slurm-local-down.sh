#!/usr/bin/env bash
# slurm-local-down.sh -- stop the one-node SLURM cluster of slurm-local-up.sh.
#
# Stops only the daemons slurm-local-up.sh started: each is read from
# <state-dir>/pids/<name> ("<pid> <start time>") and signalled only if that pid
# still has that start time (so a reused pid is never hit). Jobs still queued or
# running are cancelled first so no job step outlives slurmd.
#
# Usage: bash scripts/slurm-local-down.sh [--state-dir DIR] [--purge]
#   --state-dir DIR  as given to slurm-local-up.sh ($SFLM_SLURM_DIR, default /tmp/sflm-slurm)
#   --purge          also delete the state dir (configs, logs, job and accounting
#                    history): the next slurm-local-up.sh starts a fresh cluster
# Exit status: 0 stopped (or nothing to stop), 1 a daemon could not be stopped, 2 usage error.
set -Euo pipefail

STATE=${SFLM_SLURM_DIR:-/tmp/sflm-slurm}
PURGE=0
usage() { printf 'slurm-local-down.sh: %s (see --help)\n' "$1" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --state-dir) [ $# -ge 2 ] || usage "--state-dir needs a value"; STATE=$2; shift 2 ;;
    --state-dir=*) STATE=${1#*=}; shift ;;
    --purge) PURGE=1; shift ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
case "$STATE" in /*) ;; *) usage "--state-dir / SFLM_SLURM_DIR must be an absolute path, got '$STATE'" ;; esac
STATE=${STATE%/}
PIDS=$STATE/pids
export SLURM_CONF=$STATE/etc/slurm.conf
T0=$(date +%s%N)

log() { printf '[slurm-down %s] %s\n' "$(date +%T)" "$*" >&2; }
elapsed() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '%d.%01d' $((ms / 1000)) $((ms % 1000 / 100)); }

if [ ! -d "$STATE" ]; then log "no state dir $STATE: nothing to stop"; exit 0; fi
[ "$(id -u)" = 0 ] || { log "ERROR: must run as root"; exit 1; }
exec 9> "$STATE/.lock"
flock -w 600 9 || { log "ERROR: another slurm-local-up/down holds $STATE/.lock"; exit 1; }

starttime() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086  # split the fields on purpose; starttime is field 22
  set -- $stat
  echo "${20}"
}
ours() {  # ours NAME -> print the pid if NAME was started by slurm-local-up.sh and still runs
  local pid st
  [ -s "$PIDS/$1" ] || return 1
  read -r pid st < "$PIDS/$1" || return 1
  if [ -n "$pid" ] && [ "$(starttime "$pid" 2>/dev/null)" = "$st" ]; then echo "$pid"; return 0; fi
  rm -f "$PIDS/$1"   # stale record: that daemon is gone already
  return 1
}
wait_gone() {  # wait_gone SECONDS PID...
  local deadline=$(( $(date +%s) + $1 )) p alive; shift
  while :; do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && return 0
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
# stop NAME... : SIGTERM the given daemons together, wait, SIGKILL stragglers
failed=0
stop() {
  local name pid pids=() names=()
  for name in "$@"; do
    pid=$(ours "$name") || continue
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid"); names+=("$name")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  if ! wait_gone 30 "${pids[@]}"; then
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then log "pid $pid ignored SIGTERM for 30 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
    done
    wait_gone 10 "${pids[@]}" || { log "ERROR: could not stop pids ${pids[*]}"; failed=1; }
  fi
  for name in "${names[@]}"; do rm -f "$PIDS/$name"; done
}

# Cancel every job of this cluster (only reachable while our slurmctld runs).
if ours slurmctld >/dev/null && ours slurmd >/dev/null; then
  jobs=$(timeout 15 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    log "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    timeout 15 scancel $jobs 2>/dev/null || true
    deadline=$(( $(date +%s) + 30 ))
    while [ -n "$(timeout 10 squeue -h 2>/dev/null)" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.5; done
    [ -z "$(timeout 10 squeue -h 2>/dev/null)" ] || log "warning: jobs still listed after 30 s: $(timeout 10 squeue -h -o '%A %T' | tr '\n' ' ')"
  fi
fi

# Reverse start order: slurmctld flushes job records to slurmdbd on exit, so
# slurmdbd stops after it, and MariaDB after slurmdbd (munge with it: nothing
# needs credentials any more). Daemons in one `stop` shut down in parallel.
stop slurmd slurmctld
stop slurmdbd
stop mariadbd munged

if [ -f "$STATE/etc-link" ]; then
  link=$(cat "$STATE/etc-link")
  if [ -L "$link" ] && [ "$(readlink "$link")" = "$STATE/etc/slurm.conf" ]; then rm -f "$link"; fi
  rm -f "$STATE/etc-link"
fi

if [ "$failed" = 1 ]; then log "ERROR: some daemons did not stop; state dir kept"; exit 1; fi
if [ "$PURGE" = 1 ]; then
  left=$(ls -A "$PIDS" 2>/dev/null)
  if [ -n "$left" ]; then log "ERROR: pid records left ($left); not purging"; exit 1; fi
  log "purging $STATE"
  rm -rf "$STATE"
fi
log "done ($(elapsed) s)"
