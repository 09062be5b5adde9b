#!/usr/bin/env bash
# tests/slurm/lab/up.sh: the Slurm cluster the test suite runs on, on this one machine.
#
#   sudo tests/slurm/lab/up.sh [-n NODES] [-a] [-d DIR]     (make lab: -n 3 -a)
#
# Debian's slurmctld/slurmd/munge (and slurmdbd + MariaDB with -a) are installed with apt when
# missing. Node I is `slurmd -N nodeI` in its own UTS namespace (hostname nodeI), on port
# 6827+I, at NodeAddr 127.0.10.I (loopback; /etc/hosts maps the name). The config goes to
# /etc/slurm, where the client commands read it. Every daemon's PID is recorded under
# DIR/pids; down.sh stops exactly those. Running it again with the same settings while every
# daemon lives only checks that the nodes are idle.
set -euo pipefail

NODES=${NODERUN_LAB_NODES:-3}
ACCT=${NODERUN_LAB_ACCOUNTING:-0}
DIR=${NODERUN_LAB_DIR:-/tmp/noderun-slurm-lab}
PORT=6817          # slurmctld; slurmdbd PORT+2, MariaDB PORT+3, slurmd of nodeI PORT+10+I
CPUS=4             # per node: two lanes' 2-task-a-node jobs side by side (make test-lanes)
MEM_MB=4096
WAIT_S=${NODERUN_LAB_TIMEOUT:-90}

while [ $# -gt 0 ]; do
  case $1 in
    -n) NODES=$2; shift 2 ;;
    -a) ACCT=1; shift ;;
    -d) DIR=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "up.sh: unknown option $1 (see $0 --help)" >&2; exit 2 ;;
  esac
done
[[ $NODES =~ ^[1-9][0-9]?$ ]] || { echo "up.sh: -n takes 1..99 nodes, not '$NODES'" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "up.sh: run as root (it starts daemons and edits /etc/hosts, /etc/slurm)" >&2; exit 1; }

HERE=$(cd "$(dirname "$0")" && pwd)
TAG="# noderun test lab (tests/slurm/lab/up.sh); rewritten on every start"
ETC=/etc/slurm
START=$SECONDS
say() { printf '[lab %3ds] %s\n' $((SECONDS - START)) "$*"; }
fail() { echo "up.sh: $*" >&2; exit 1; }
running() { [ -n "${1:-}" ] && [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
poll() {  # poll SECONDS CMD...: retry CMD every 0.25 s until it succeeds
  local until=$((SECONDS + $1)); shift
  while ! "$@" >/dev/null 2>&1; do [ $SECONDS -lt $until ] || return 1; sleep 0.25; done
}
keep_pid() {  # keep_pid NAME PIDFILE: the daemon wrote its PID; remember it for down.sh
  poll 20 test -s "$2" || fail "$1 wrote no pid file $2 (its log is under $DIR/log)"
  local pid; pid=$(cat "$2")
  running "$pid" || fail "$1 exited at once (its log is under $DIR/log)"
  echo "$pid" > "$DIR/pids/$1.pid"
}
nodes_idle() { [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = "$NODES" ]; }

# -- packages ---------------------------------------------------------------------------------
want=(slurmctld slurmd slurm-client munge)
[ "$ACCT" = 1 ] && want+=(slurmdbd mariadb-server)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  # no init script may start a system daemon of its own: this lab owns every daemon it runs
  blocker=/usr/sbin/policy-rc.d; own_blocker=0
  if [ ! -e $blocker ]; then printf '#!/bin/sh\nexit 101\n' > $blocker; chmod +x $blocker; own_blocker=1; fi
  log=/tmp/noderun-slurm-lab-apt.log; ok=0
  for attempt in 1 2 3; do
    if DEBIAN_FRONTEND=noninteractive apt-get update -q > $log 2>&1 &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >> $log 2>&1
    then ok=1; break; fi
    sleep $((attempt * 2))
  done
  [ $own_blocker = 1 ] && rm -f $blocker
  [ $ok = 1 ] || { tail -n 15 $log >&2; fail "apt-get install failed (full log: $log)"; }
fi

# -- configuration ----------------------------------------------------------------------------
NEW=$(mktemp -d); trap 'rm -rf "$NEW"' EXIT
cat > "$NEW/slurm.conf" <<CONF
$TAG
# state: $DIR
ClusterName=lab
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may start again cred_expire+1 s after it ended (Slurm's default: 120 s)
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
# no systemd, no cgroup delegation: track processes through /proc, bind nothing
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
# start a batch job when it is submitted, not at the next scheduler tick
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the nodes report the CPUs and memory below, whatever the machine has
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
Waittime=0
# finished jobs stay visible to scontrol for 5 minutes
MinJobAge=300
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
CONF
if [ "$ACCT" = 1 ]; then
  cat >> "$NEW/slurm.conf" <<CONF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((PORT + 2))
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
CONF
  cat > "$NEW/slurmdbd.conf" <<CONF
$TAG
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$((PORT + 2))
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((PORT + 3))
StorageUser=slurm
StoragePass=noderun-lab
StorageLoc=slurm_acct_db
CONF
else
  printf '%s\n' AccountingStorageType=accounting_storage/none JobAcctGatherType=jobacct_gather/none >> "$NEW/slurm.conf"
fi
for i in $(seq "$NODES"); do
  echo "NodeName=node$i NodeAddr=127.0.10.$i Port=$((PORT + 10 + i)) CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM_MB State=UNKNOWN" >> "$NEW/slurm.conf"
done
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$NEW/slurm.conf"

# -- already up? ------------------------------------------------------------------------------
same_config() {
  cmp -s "$NEW/slurm.conf" $ETC/slurm.conf || return 1
  if [ -e "$NEW/slurmdbd.conf" ]; then cmp -s "$NEW/slurmdbd.conf" $ETC/slurmdbd.conf; else [ ! -e $ETC/slurmdbd.conf ]; fi
}
live=0; dead=0
for f in "$DIR"/pids/*.pid; do
  [ -e "$f" ] || continue
  if running "$(cat "$f")"; then live=$((live + 1)); else dead=$((dead + 1)); fi
done
if [ $live -gt 0 ] && [ $dead = 0 ] && same_config; then
  poll "$WAIT_S" nodes_idle || fail "the lab runs but its nodes are not idle: $(sinfo -N 2>&1 | tr '\n' ' ')"
  say "already up: $NODES nodes idle"
  exit 0
fi
if [ $live -gt 0 ]; then say "other settings, or a daemon died: restarting"; "$HERE/down.sh" -d "$DIR"; fi
# a controller this script did not start (another lab, a system slurmctld) holds the port
if timeout 5 scontrol ping 2>/dev/null | grep -q ' is UP'; then
  fail "a Slurm controller not started by this script answers on port $PORT; stop it first (its own down script, or systemctl stop slurmctld)"
fi

# -- fresh state ------------------------------------------------------------------------------
if [ -e "$DIR" ] && [ ! -e "$DIR/.noderun-lab" ] && [ -n "$(ls -A "$DIR")" ]; then
  fail "$DIR exists and was not made by this script; pass another -d DIR"
fi
rm -rf "$DIR"
mkdir -p "$DIR"/{state,run,log,pids} && touch "$DIR/.noderun-lab"
for i in $(seq "$NODES"); do mkdir -p "$DIR/spool/node$i"; done
mkdir -p $ETC
for f in slurm.conf slurmdbd.conf gres.conf; do   # a config someone else wrote is kept aside
  if [ -e $ETC/$f ] && ! head -n1 $ETC/$f | grep -qF "$TAG"; then mv $ETC/$f $ETC/$f.before-noderun-lab; fi
  rm -f $ETC/$f
done
install -m 644 "$NEW/slurm.conf" $ETC/slurm.conf
[ -e "$NEW/slurmdbd.conf" ] && install -m 600 "$NEW/slurmdbd.conf" $ETC/slurmdbd.conf
# /etc/hosts may be a bind mount: rewrite its content, never replace the file
{ sed '/^# noderun-slurm-lab begin$/,/^# noderun-slurm-lab end$/d' /etc/hosts
  echo "# noderun-slurm-lab begin"
  for i in $(seq "$NODES"); do echo "127.0.10.$i node$i"; done
  echo "# noderun-slurm-lab end"; } > "$NEW/hosts"
cmp -s "$NEW/hosts" /etc/hosts || cat "$NEW/hosts" > /etc/hosts

# -- munge ------------------------------------------------------------------------------------
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  say "munged already answers (not ours; left running by down.sh)"
else
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  fi
  install -d -o munge -g munge -m 755 /run/munge
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  keep_pid munged /run/munge/munged.pid
  poll 10 sh -c 'munge -n | unmunge' || fail "munged does not answer"
fi

# -- accounting -------------------------------------------------------------------------------
if [ "$ACCT" = 1 ]; then
  DB=$DIR/mariadb
  install -d -o mysql -g mysql "$DB"
  mariadb-install-db --no-defaults --user=mysql --datadir="$DB/data" --skip-test-db \
    --auth-root-authentication-method=socket > "$DIR/log/mariadb-install.log" 2>&1 ||
    fail "mariadb-install-db failed (see $DIR/log/mariadb-install.log)"
  # mariadbd stays in the foreground: detach it; its pid file says which process it is
  setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB/data" \
    --socket="$DB/sock" --pid-file="$DB/pid" --bind-address=127.0.0.1 --port=$((PORT + 3)) \
    --skip-name-resolve --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 \
    --log-error="$DIR/log/mariadb.log" < /dev/null > /dev/null 2>&1 &
  keep_pid mariadbd "$DB/pid"
  poll 30 mariadb --socket="$DB/sock" -e 'select 1' || fail "MariaDB does not answer (see $DIR/log/mariadb.log)"
  mariadb --socket="$DB/sock" -e "CREATE DATABASE slurm_acct_db;
    CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'noderun-lab';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  slurmdbd
  keep_pid slurmdbd "$DIR/run/slurmdbd.pid"
  poll 30 sacctmgr -n show cluster || fail "slurmdbd does not answer (see $DIR/log/slurmdbd.log)"
  sacctmgr -i add cluster lab > /dev/null
  say "accounting: MariaDB on port $((PORT + 3)), slurmdbd on $((PORT + 2))"
fi

# -- controller and nodes ---------------------------------------------------------------------
slurmctld
keep_pid slurmctld "$DIR/run/slurmctld.pid"
poll 30 sh -c 'scontrol ping | grep -q " is UP"' || fail "slurmctld does not answer (see $DIR/log/slurmctld.log)"
# each node needs its own hostname: torchrun's c10d rendezvous decides who hosts the store by it
unshare --uts true 2>/dev/null || fail "unshare --uts is not permitted here; the nodes need their own hostnames"
for i in $(seq "$NODES"); do
  unshare --uts sh -c "hostname node$i && exec slurmd -N node$i"
  keep_pid "slurmd-node$i" "$DIR/run/slurmd-node$i.pid"
  readlink "/proc/$(cat "$DIR/pids/slurmd-node$i.pid")/ns/uts" > "$DIR/pids/slurmd-node$i.uts"
done
poll "$WAIT_S" nodes_idle || { sinfo -N >&2; fail "nodes not idle after ${WAIT_S}s (logs in $DIR/log)"; }
say "up: node[1-$NODES] idle, partition debug$([ "$ACCT" = 1 ] && echo ', sacct works'); stop with $HERE/down.sh"
