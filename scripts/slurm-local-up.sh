#!/usr/bin/env bash
# slurm-local-up.sh -- bring up a real one-node SLURM cluster on this machine.
#
# munged, MariaDB, slurmdbd, slurmctld and slurmd, all started by this script
# (no systemd needed), all addressed via 127.0.0.1, all state under one state
# directory. Installs the Debian packages when they are missing. Idempotent: a
# second run against a healthy cluster changes nothing and exits 0 in ~1 s.
# slurm-local-down.sh stops exactly the daemons this script started.
#
# Usage: bash scripts/slurm-local-up.sh [--gpus N] [--state-dir DIR] [--port BASE]
#                                        [--no-install] [--no-smoke]
#   --gpus N        advertise N fake GPUs (gres/gpu backed by /dev/null-like
#                   device nodes) so --gpus-per-node jobs schedule. Default: keep
#                   what the state dir was last started with (0 for a new one).
#   --state-dir DIR configs, logs, spool, database, pid records ($SFLM_SLURM_DIR,
#                   default /tmp/sflm-slurm)
#   --port BASE     slurmctld port; slurmd uses BASE+1, slurmdbd BASE+2
#                   ($SFLM_SLURM_PORT, default 6817)
#   --no-install    fail instead of running apt-get when packages are missing
#   --no-smoke      skip the srun + sbatch/sacct smoke test after a (re)start
#
# Stdout carries only the environment to use the cluster (eval-able):
#   export SLURM_CONF=<state-dir>/etc/slurm.conf
# (the same line is in <state-dir>/env). Progress goes to stderr.
# Exit status: 0 cluster usable, 1 bring-up failed, 2 usage error.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPLATES=$HERE/slurm
CLUSTER=sflm
PARTITION=debug
PACKAGES=(munge slurm-client slurmctld slurmd slurmdbd mariadb-server)
T0=$(date +%s%N)

log() { printf '[slurm-up %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { printf 'slurm-local-up.sh: %s (see --help)\n' "$1" >&2; exit 2; }

# ------------------------------------------------------------------ arguments
STATE=${SFLM_SLURM_DIR:-/tmp/sflm-slurm}
PORT=${SFLM_SLURM_PORT:-6817}
GPUS=""
INSTALL=1
SMOKE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) [ $# -ge 2 ] || usage "--gpus needs a value"; GPUS=$2; shift 2 ;;
    --gpus=*) GPUS=${1#*=}; shift ;;
    --state-dir) [ $# -ge 2 ] || usage "--state-dir needs a value"; STATE=$2; shift 2 ;;
    --state-dir=*) STATE=${1#*=}; shift ;;
    --port) [ $# -ge 2 ] || usage "--port needs a value"; PORT=$2; shift 2 ;;
    --port=*) PORT=${1#*=}; shift ;;
    --no-install) INSTALL=0; shift ;;
    --no-smoke) SMOKE=0; shift ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) usage "unknown argument '$1'" ;;
  esac
done
[[ -z "$GPUS" || "$GPUS" =~ ^[0-9]+$ ]] || usage "--gpus must be a non-negative integer, got '$GPUS'"
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1024 ] && [ "$PORT" -le 65533 ] \
  || usage "--port / SFLM_SLURM_PORT must be an integer in 1024..65533, got '$PORT'"
case "$STATE" in /*) ;; *) usage "--state-dir / SFLM_SLURM_DIR must be an absolute path, got '$STATE'" ;; esac
[[ "$STATE" =~ ^[A-Za-z0-9_./-]+$ ]] || usage "state dir '$STATE' may only contain letters, digits and _ . / -"
STATE=${STATE%/}
CTLD_PORT=$PORT
SLURMD_PORT=$((PORT + 1))
DBD_PORT=$((PORT + 2))

[ "$(uname -s)" = Linux ] || die "Linux only"
[ "$(id -u)" = 0 ] || die "must run as root (it starts munged, MariaDB and the Slurm daemons)"

CONF=$STATE/etc/slurm.conf
DBDCONF=$STATE/etc/slurmdbd.conf
GRESCONF=$STATE/etc/gres.conf
MUNGE_DIR=$STATE/munge
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
DB_DIR=$STATE/mysql
DB_SOCKET=$DB_DIR/mysqld.sock
PIDS=$STATE/pids            # <name>: "<pid> <start time>" of daemons this script started
export SLURM_CONF=$CONF     # every slurm command/daemon below uses our config
export MYSQL_UNIX_PORT=$DB_SOCKET

# ------------------------------------------------------------------ helpers
# wait_for SECONDS CMD... : poll CMD every 0.2 s until it succeeds or the deadline passes
wait_for() {
  local deadline
  deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
# start time (clock ticks since boot) of a pid: guards against pid reuse
starttime() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }                       # fields after "(comm) "
  # shellcheck disable=SC2086  # split the fields on purpose; starttime is field 22
  set -- $stat
  echo "${20}"
}
# ours NAME -> print the pid if NAME was started by this script and still runs
ours() {
  local pid st
  [ -s "$PIDS/$1" ] || return 1
  read -r pid st < "$PIDS/$1" || return 1
  [ -n "$pid" ] && [ "$(starttime "$pid" 2>/dev/null)" = "$st" ] || return 1
  echo "$pid"
}
# record NAME PIDFILE : wait for the daemon's own pid file, then remember its pid
record() {
  local pid
  wait_for 30 test -s "$2" || die "$1 did not write $2 (see $STATE/log/)"
  pid=$(cat "$2")
  wait_for 5 test -d "/proc/$pid" || die "$1 (pid $pid) exited right after start (see $STATE/log/)"
  echo "$pid $(starttime "$pid")" > "$PIDS/$1.tmp"
  mv -f "$PIDS/$1.tmp" "$PIDS/$1"
}
# pidfile_alive PIDFILE : a process named in PIDFILE is alive (started by anyone)
pidfile_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
# stop_ours NAME : SIGTERM a daemon we started, wait (deadline), SIGKILL if needed
stop_ours() {
  local pid
  pid=$(ours "$1") || return 0
  log "stopping $1 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  wait_for 30 sh -c "! kill -0 $pid" || { log "$1 ignored SIGTERM for 30 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$PIDS/$1"
}
# port_busy PORT : something accepts TCP connections on 127.0.0.1:PORT
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
need_port() {
  if port_busy "$1"; then
    die "port $1 ($2) on 127.0.0.1 is taken by another process; pick other ports with --port / SFLM_SLURM_PORT"
  fi
}
# render TEMPLATE : substitute the @NAME@ placeholders (values never contain '|' or '&')
PLACEHOLDERS='CLUSTER|PARTITION|HOST|STATE|CTLD_PORT|SLURMD_PORT|DBD_PORT|MUNGE_SOCKET|COMM_PARAMS|DEF_MEM_PER_CPU|NODE_LINE|GPU_FILES'
render() {
  sed -e "s|@CLUSTER@|$CLUSTER|g" -e "s|@PARTITION@|$PARTITION|g" -e "s|@HOST@|$HOST|g" \
      -e "s|@STATE@|$STATE|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" \
      -e "s|@DBD_PORT@|$DBD_PORT|g" -e "s|@MUNGE_SOCKET@|$MUNGE_SOCKET|g" \
      -e "s|@COMM_PARAMS@|$COMM_PARAMS|g" -e "s|@DEF_MEM_PER_CPU@|$DEF_MEM_PER_CPU|g" \
      -e "s|@NODE_LINE@|$NODE_LINE|g" -e "s|@GPU_FILES@|$GPU_FILES|g" "$1"
}
# check_template TEMPLATE : fail loudly on a placeholder render() does not fill
check_template() {
  local left
  [ -r "$1" ] || die "template $1 missing"
  left=$(sed -e 's/#.*//' "$1" | grep -o '@[A-Z_]*@' | sort -u | grep -v -x -E "@($PLACEHOLDERS)@" || true)
  [ -z "$left" ] || die "$1: unknown placeholder(s) $left"
}
# install_if_changed CONTENT FILE MODE : atomic write; returns 0 if FILE changed
install_if_changed() {
  if [ -f "$2" ] && [ "$(cat "$2")" = "$1" ]; then return 1; fi
  printf '%s\n' "$1" > "$2.tmp"
  chmod "$3" "$2.tmp"
  mv -f "$2.tmp" "$2"
  return 0
}
# Every client call is bounded by `timeout` so a hung daemon cannot hang this script.
node_state() { timeout 10 sinfo -h -N -n "$HOST" -o %T 2>/dev/null | head -n1; }
node_ready() { case "$(node_state)" in idle|mixed|allocated|completing) return 0 ;; *) return 1 ;; esac; }
cluster_registered() { timeout 10 sacctmgr -n -P list cluster format=Cluster 2>/dev/null | grep -qx "$CLUSTER"; }
accounting_ok() { cluster_registered && timeout 10 sacct -n -X -S now-1minutes -o JobID >/dev/null 2>&1; }
print_env() {
  printf 'export SLURM_CONF=%s\n' "$CONF" > "$STATE/env.tmp" && mv -f "$STATE/env.tmp" "$STATE/env"
  cat "$STATE/env"
}
elapsed() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '%d.%01d' $((ms / 1000)) $((ms % 1000 / 100)); }

# ------------------------------------------------------------------ state dir + lock
install -d -m 0755 "$STATE" "$STATE/etc" "$STATE/log" "$STATE/run" "$STATE/spool" \
  "$STATE/spool/ctld" "$STATE/spool/slurmd" "$PIDS"
# fd 9 holds the lock; every daemon is started with 9>&- so it does not inherit it
exec 9> "$STATE/.lock"
flock -w 600 9 || die "another slurm-local-up/down holds $STATE/.lock"

# ------------------------------------------------------------------ packages
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$INSTALL" = 1 ] || die "missing packages: ${missing[*]} (run without --no-install, or apt-get install them)"
  command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get (Debian/Ubuntu only)"
  log "installing ${missing[*]} (apt-get, no recommends)"
  # Without an init system the packages' postinst scripts would try to start
  # munge/mariadb/slurm via invoke-rc.d; a policy-rc.d that exits 101 makes
  # them skip that (we start every daemon ourselves). Keep an existing one.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d; own_policy=1
  fi
  apt_rc=0
  {
    apt-get -o DPkg::Lock::Timeout=300 update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
      --no-install-recommends "${missing[@]}"
  } > "$STATE/log/apt.log" 2>&1 || apt_rc=$?
  [ "$own_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
  [ "$apt_rc" = 0 ] || { tail -n 20 "$STATE/log/apt.log" >&2; die "apt-get failed (log: $STATE/log/apt.log)"; }
  log "packages installed ($(elapsed) s)"
fi
for c in munged mungekey slurmctld slurmd slurmdbd mariadbd mariadb-install-db mariadb-admin sinfo sacct; do
  command -v "$c" >/dev/null || die "'$c' not found on PATH after installing ${PACKAGES[*]}"
done
id munge >/dev/null 2>&1 || die "user 'munge' missing (created by the munge package)"
id mysql >/dev/null 2>&1 || die "user 'mysql' missing (created by the mariadb-server package)"

# ------------------------------------------------------------------ render configs
HOST=$(hostname -s)
[ -n "$HOST" ] || die "empty host name"
# Real layout of this machine, e.g.
#   NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105
HW=$(slurmd -C 2>/dev/null | head -n1)
case "$HW" in NodeName=*CPUs=*RealMemory=*) ;; *) die "unexpected 'slurmd -C' output: '$HW'" ;; esac
CPUS=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$HW")
MEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW")
DEF_MEM_PER_CPU=$(( MEM / CPUS < 1024 ? MEM / CPUS : 1024 ))

if [ -z "$GPUS" ]; then GPUS=$(cat "$STATE/gpus" 2>/dev/null || echo 0); fi
GPU_FILES=""
NODE_LINE="$HW NodeAddr=127.0.0.1 NodeHostname=$HOST State=UNKNOWN"
if [ "$GPUS" -gt 0 ]; then
  install -d -m 0755 "$STATE/dev"
  for ((i = 0; i < GPUS; i++)); do
    # char device 1:3 = a clone of /dev/null; Slurm only stat()s it
    [ -c "$STATE/dev/fakegpu$i" ] || mknod -m 0666 "$STATE/dev/fakegpu$i" c 1 3 \
      || die "mknod $STATE/dev/fakegpu$i failed (fake GPUs need device nodes)"
  done
  if [ "$GPUS" = 1 ]; then GPU_FILES=$STATE/dev/fakegpu0; else GPU_FILES="$STATE/dev/fakegpu[0-$((GPUS - 1))]"; fi
  NODE_LINE="$HW NodeAddr=127.0.0.1 NodeHostname=$HOST Gres=gpu:$GPUS State=UNKNOWN"
fi

# Bind the daemons to 127.0.0.1 only when that is what the host name resolves
# to: Slurm's NoInAddrAny binds to the address of gethostname(), so on a host
# whose name resolves elsewhere it would bind there while everything talks to
# 127.0.0.1 (src/common/slurm_protocol_api.c, slurm_setup_addr).
HOST_ADDR=$(getent ahostsv4 "$(hostname)" 2>/dev/null | awk 'NR==1{print $1}')
case "$HOST_ADDR" in
  127.*) COMM_PARAMS="CommunicationParameters=NoCtldInAddrAny,NoInAddrAny" ;;
  *) COMM_PARAMS="# host name resolves to '${HOST_ADDR:-nothing}', not 127.x: daemons listen on all addresses"
     log "note: '$(hostname)' resolves to '${HOST_ADDR:-nothing}', so the daemons listen on all addresses (clients still use 127.0.0.1)" ;;
esac

for t in slurm.conf.in slurmdbd.conf.in gres.conf.in; do check_template "$TEMPLATES/$t"; done
slurm_changed=0; dbd_changed=0
install_if_changed "$(render "$TEMPLATES/slurm.conf.in")" "$CONF" 0644 && slurm_changed=1
install_if_changed "$(render "$TEMPLATES/slurmdbd.conf.in")" "$DBDCONF" 0600 && dbd_changed=1
if [ "$GPUS" -gt 0 ]; then
  install_if_changed "$(render "$TEMPLATES/gres.conf.in")" "$GRESCONF" 0644 && slurm_changed=1
elif [ -e "$GRESCONF" ]; then
  rm -f "$GRESCONF"; slurm_changed=1
fi
echo "$GPUS" > "$STATE/gpus"

# ------------------------------------------------------------------ fast path
if [ "$slurm_changed" = 0 ] && [ "$dbd_changed" = 0 ] \
   && ours munged >/dev/null && ours mariadbd >/dev/null && ours slurmdbd >/dev/null \
   && ours slurmctld >/dev/null && ours slurmd >/dev/null \
   && node_ready && accounting_ok; then
  log "cluster '$CLUSTER' already up and healthy (node $HOST $(node_state), $CPUS CPUs, $GPUS fake GPUs); nothing to do ($(elapsed) s)"
  print_env
  exit 0
fi

# Ports of the daemons still to start must be free before anything starts.
for d in slurmctld:$CTLD_PORT slurmd:$SLURMD_PORT slurmdbd:$DBD_PORT; do
  ours "${d%%:*}" >/dev/null || need_port "${d#*:}" "${d%%:*}"
done

# ------------------------------------------------------------------ munge
install -d -o munge -g munge -m 0755 "$MUNGE_DIR"
if [ ! -s "$MUNGE_DIR/munge.key" ]; then
  mungekey --create --keyfile="$MUNGE_DIR/munge.key.tmp" && mv -f "$MUNGE_DIR/munge.key.tmp" "$MUNGE_DIR/munge.key"
fi
chown munge:munge "$MUNGE_DIR/munge.key"; chmod 0400 "$MUNGE_DIR/munge.key"
munge_ok() { timeout 10 munge -n -S "$MUNGE_SOCKET" | timeout 10 unmunge -S "$MUNGE_SOCKET"; }
if ! ours munged >/dev/null; then
  pidfile_alive "$MUNGE_DIR/munged.pid" && die "a munged not started by this script uses $MUNGE_DIR; stop it first"
  log "starting munged"
  rm -f "$MUNGE_SOCKET" "$MUNGE_DIR/munged.pid"
  # munged refuses to run as root with root-owned files (docs/slurm.md note 1): run it as
  # the munge user; it daemonizes itself.
  runuser -u munge -- munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" \
    --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/munged.seed" 9>&- \
    || die "munged failed to start (see $MUNGE_DIR/munged.log)"
  record munged "$MUNGE_DIR/munged.pid"
fi
wait_for 15 munge_ok || die "munge round trip through $MUNGE_SOCKET failed"

# ------------------------------------------------------------------ MariaDB
if [ ! -d "$DB_DIR/mysql" ]; then
  log "initialising MariaDB data dir $DB_DIR"
  rm -rf "$DB_DIR"; install -d -o mysql -g mysql -m 0750 "$DB_DIR"
  mariadb-install-db --no-defaults --user=mysql --datadir="$DB_DIR" \
    --auth-root-authentication-method=socket --skip-test-db > "$STATE/log/mariadb-install.log" 2>&1 \
    || { tail -n 20 "$STATE/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
fi
db_ok() { timeout 10 mariadb-admin --no-defaults --socket="$DB_SOCKET" -u root ping; }
if ! ours mariadbd >/dev/null; then
  pidfile_alive "$DB_DIR/mariadbd.pid" && die "a mariadbd not started by this script uses $DB_DIR; stop it first"
  log "starting mariadbd"
  # Socket only (no TCP port), own data dir, ignores /etc/mysql. It has no
  # self-daemonizing mode: setsid -f detaches it from this shell.
  setsid -f mariadbd --no-defaults --user=mysql --datadir="$DB_DIR" --socket="$DB_SOCKET" \
    --pid-file="$DB_DIR/mariadbd.pid" --skip-networking --log-error="$STATE/log/mariadb.log" \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
    < /dev/null > /dev/null 2>&1 9>&-
  wait_for 60 db_ok || die "mariadbd did not answer within 60 s (see $STATE/log/mariadb.log)"
  record mariadbd "$DB_DIR/mariadbd.pid"
fi
wait_for 30 db_ok || die "mariadbd not answering on $DB_SOCKET"

# ------------------------------------------------------------------ slurmdbd
if [ "$dbd_changed" = 1 ] && ours slurmdbd >/dev/null; then
  log "slurmdbd.conf changed: restarting slurmdbd"; stop_ours slurmdbd
fi
if ! ours slurmdbd >/dev/null; then
  pidfile_alive "$STATE/run/slurmdbd.pid" && die "a slurmdbd not started by this script uses $STATE; stop it first"
  log "starting slurmdbd"
  rm -f "$STATE/run/slurmdbd.pid"
  slurmdbd 9>&- || die "slurmdbd failed to start (see $STATE/log/slurmdbd.log)"
  record slurmdbd "$STATE/run/slurmdbd.pid"
fi
wait_for 60 timeout 10 sacctmgr -n list cluster || die "slurmdbd not answering (see $STATE/log/slurmdbd.log)"

# ------------------------------------------------------------------ slurmctld + slurmd
if [ "$slurm_changed" = 1 ]; then
  # node/port/gres changes need a restart, not only `scontrol reconfigure`
  for d in slurmd slurmctld; do
    if ours "$d" >/dev/null; then log "slurm.conf changed: restarting $d"; stop_ours "$d"; fi
  done
fi
if ! ours slurmctld >/dev/null; then
  pidfile_alive "$STATE/run/slurmctld.pid" && die "a slurmctld not started by this script uses $STATE; stop it first"
  log "starting slurmctld"
  rm -f "$STATE/run/slurmctld.pid"
  slurmctld -f "$CONF" 9>&- || die "slurmctld failed to start (see $STATE/log/slurmctld.log)"
  record slurmctld "$STATE/run/slurmctld.pid"
fi
wait_for 60 timeout 10 scontrol ping || die "slurmctld not answering (see $STATE/log/slurmctld.log)"
if ! ours slurmd >/dev/null; then
  # a second slurmd on the same spool kills the first (docs/slurm.md note 3): check first
  pidfile_alive "$STATE/run/slurmd.pid" && die "a slurmd not started by this script uses $STATE; stop it first"
  log "starting slurmd"
  rm -f "$STATE/run/slurmd.pid"
  slurmd -f "$CONF" 9>&- || die "slurmd failed to start (see $STATE/log/slurmd.log)"
  record slurmd "$STATE/run/slurmd.pid"
fi

if ! wait_for 60 node_ready; then
  # e.g. 'down' after an unclean stop; ReturnToService=2 usually prevents this
  log "node $HOST is '$(node_state)' (reason: $(timeout 10 sinfo -h -N -n "$HOST" -o %E 2>/dev/null)); resuming it"
  timeout 10 scontrol update nodename="$HOST" state=resume || true
  wait_for 30 node_ready || die "node $HOST not usable: '$(node_state)' (see $STATE/log/slurmd.log)"
fi
wait_for 60 accounting_ok || die "slurmctld did not register cluster '$CLUSTER' with slurmdbd (see $STATE/log/)"
log "node $HOST is $(node_state): $CPUS CPUs, ${MEM} MB, $GPUS fake GPUs; accounting up ($(elapsed) s)"

# ------------------------------------------------------------------ smoke test
if [ "$SMOKE" = 1 ]; then
  out=$(timeout 60 srun -N1 -n1 -t 1 hostname 2>&1) || die "srun failed: $out"
  smoke_out=$STATE/log/smoke-%j.out
  # shellcheck disable=SC2016  # $SLURM_JOB_ID expands inside the job
  jid=$(timeout 30 sbatch --parsable -t 1 -o "$smoke_out" -J sflm-smoke --wrap 'echo "smoke ok $SLURM_JOB_ID"') \
    || die "sbatch failed"
  jid=${jid%%;*}
  smoke_state() { timeout 10 sacct -n -X -P -j "$jid" -o State 2>/dev/null | head -n1; }
  # sbatch --wait polls at growing intervals (docs/slurm.md note 5); poll sacct instead
  smoke_done() { [ "$(smoke_state)" = COMPLETED ]; }
  wait_for 60 smoke_done \
    || die "smoke job $jid did not reach COMPLETED in sacct (state '$(smoke_state)')"
  grep -q "^smoke ok $jid\$" "$STATE/log/smoke-$jid.out" || die "smoke job $jid wrote: $(cat "$STATE/log/smoke-$jid.out" 2>&1)"
  rm -f "$STATE/log/smoke-$jid.out"
  log "smoke test passed: srun, sbatch job $jid COMPLETED in sacct"
fi

# Convenience: let slurm commands work without SLURM_CONF when the system has
# no slurm.conf of its own (removed again by slurm-local-down.sh).
if [ ! -e /etc/slurm/slurm.conf ] && [ ! -L /etc/slurm/slurm.conf ]; then
  install -d -m 0755 /etc/slurm && ln -s "$CONF" /etc/slurm/slurm.conf && echo /etc/slurm/slurm.conf > "$STATE/etc-link"
fi

log "cluster '$CLUSTER' up in $(elapsed) s; partitions '$PARTITION' (default) and 'urgent' (preempts it); state in $STATE"
print_env
