#!/usr/bin/env bash
# A throw-away Slurm cluster on this one machine, for the tests: Debian's Slurm 22.05 with
# accounting (munged, MariaDB, slurmdbd, slurmctld) and NODES emulated compute nodes (one slurmd
# each, distinct ports, fake GPU device files). Needs root and no init system.
#
#   tests/slurm/cluster.sh up      # installs the packages if missing, starts everything, waits for idle nodes
#   tests/slurm/cluster.sh down    # stops every daemon it started, by PID file (never by name)
#   tests/slurm/cluster.sh with CMD...   # CMD with the cluster up: brought up for it (as root, where none
#                                        # is up) and taken down after, whatever CMD's exit status
#
# `with` is how the suite and the rehearsal run (make test, .ci/run): once Slurm is installed, its clients wait
# 10 s for a controller that is down, and Snakemake's Slurm plugin runs `scontrol show config` at every start,
# local runs too. A cluster up only for the Slurm tests cost every Snakemake start after them those 10 s.
#
# Settings (environment): NODES (2), GPUS_PER_NODE (2), CPUS_PER_NODE (4), MEM_PER_NODE (8000 MB),
# ACCOUNT (r1test), PARTITION (cpu), STATE (/var/tmp/r1-slurm: logs, state, pid files).
set -euo pipefail
NODES=${NODES:-2}
GPUS=${GPUS_PER_NODE:-2}
CPUS=${CPUS_PER_NODE:-4}
MEM=${MEM_PER_NODE:-8000}
ACCOUNT=${ACCOUNT:-r1test}
PARTITION=${PARTITION:-cpu}
STATE=${STATE:-/var/tmp/r1-slurm}
PIDS="$STATE/pids"

log() { echo "[cluster $(date +%T)] $*"; }

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null && return
    export DEBIAN_FRONTEND=noninteractive
    # Package scripts must not try to start services: there is no init system.
    [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
    # one apt at a time: the suite's other xdist worker may be installing the image builder's packages
    flock /var/lock/r1-apt.lock sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends \
        slurm-wlm slurm-client slurmdbd munge mariadb-server'
    log "packages installed"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || { log "timed out waiting for $what"; exit 1; }
        sleep 0.2
    done
}

write_configs() {
    cat > /etc/slurm/slurm.conf <<CONF
ClusterName=r1test
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd-%n
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
# No systemd and no usable cgroups here: Linux process tracking, and no CPU binding: the nodes claim
# more CPUs than this machine has, so task/affinity can give a 2-CPU job a mask of 1 real CPU, and its
# step then fails at random ("failed to distribute tasks"; Snakemake's retry hides it as an extra job).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
# The executor plugin puts the rule name in the job comment: keep it for sacct.
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# The nodes below claim more CPUs and memory than this machine has: trust the config.
SlurmdParameters=config_overrides
ReturnToService=2
# Finished jobs stay visible to squeue for 10 minutes (the executor may poll with it).
MinJobAge=600
KillWait=10
MpiDefault=none
GresTypes=gpu
CONF
    for n in $(seq 1 "$NODES"); do
        echo "NodeName=n$n NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((17000 + n)) CPUs=$CPUS RealMemory=$MEM Gres=gpu:$GPUS State=UNKNOWN" >> /etc/slurm/slurm.conf
        mkdir -p "$STATE/slurmd-n$n"
    done
    echo "PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> /etc/slurm/slurm.conf
    # Slurm 22.05 wants GPU files that exist: character devices standing in for /dev/nvidia*.
    for i in $(seq 0 $((GPUS - 1))); do [ -e "$STATE/gpu/gpu$i" ] || mknod "$STATE/gpu/gpu$i" c 1 3; done
    echo "Name=gpu File=$STATE/gpu/gpu[0-$((GPUS - 1))]" > /etc/slurm/gres.conf
    install -m 600 -o slurm -g slurm /dev/stdin /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=slurm
PidFile=$PIDS/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
}

node_names_resolve() {
    # Multi-node jobs address their first node by name (torch rendezvous): the emulated nodes are this host.
    for n in $(seq 1 "$NODES"); do
        grep -qE "^127\.0\.0\.1\s+n$n(\s|$)" /etc/hosts || echo "127.0.0.1 n$n" >> /etc/hosts
    done
}

up() {
    install_packages
    mkdir -p "$STATE"/{ctld,log,gpu} "$PIDS" /run/munge /run/mysqld
    chown slurm: "$STATE/ctld" "$STATE/log" "$PIDS"
    chmod 1777 "$PIDS"  # slurm and mysql write their PID files here
    chown munge: /run/munge
    chown mysql: /run/mysqld
    write_configs
    node_names_resolve

    [ -s /etc/munge/munge.key ] || { mungekey -c -f -k /etc/munge/munge.key; chown munge: /etc/munge/munge.key; chmod 600 /etc/munge/munge.key; }
    runuser -u munge -- /usr/sbin/munged  # its PID file must stay in its own directory (munged checks)
    wait_for 10 munged bash -c 'munge -n | unmunge'
    log "munged up"

    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null
    (runuser -u mysql -- /usr/sbin/mariadbd --bind-address=127.0.0.1 --socket=/run/mysqld/mysqld.sock \
        --pid-file="$PIDS/mariadbd.pid" --innodb-buffer-pool-size=64M > "$STATE/log/mariadb.log" 2>&1 &)
    wait_for 30 mariadb mariadb -e 'select 1'
    mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
                CREATE DATABASE IF NOT EXISTS slurm_acct_db; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
    log "mariadb up"

    /usr/sbin/slurmdbd
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -i -Q add cluster r1test >/dev/null || true
    sacctmgr -i -Q add account "$ACCOUNT" Description=tests Organization=tests >/dev/null || true
    sacctmgr -i -Q add user "$(id -un)" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >/dev/null || true
    log "slurmdbd up, account $ACCOUNT"

    /usr/sbin/slurmctld
    for n in $(seq 1 "$NODES"); do /usr/sbin/slurmd -N "n$n"; done
    wait_for 60 "$NODES idle nodes" bash -c "[ \"\$(sinfo -h -t idle -o %D | awk '{s+=\$1} END {print s+0}')\" = $NODES ]"
    sinfo -N -o '%N %T %c %m %G'
    log "slurm ready: $NODES nodes x $GPUS fake GPUs, partition $PARTITION, account $ACCOUNT"
}

down() {
    # Reverse start order; only processes whose PID files this script's daemons wrote.
    for pidfile in "$PIDS"/slurmd-*.pid "$PIDS/slurmctld.pid" "$PIDS/slurmdbd.pid" "$PIDS/mariadbd.pid" /run/munge/munged.pid; do
        [ -s "$pidfile" ] || continue
        pid=$(cat "$pidfile")
        if kill "$pid" 2>/dev/null; then
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            log "stopped $(basename "$pidfile" .pid) ($pid)"
        fi
        rm -f "$pidfile"
    done
}

with() {
    local started=0 status=0
    if ! sinfo -h >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        started=1  # taken down after even when it did not come up whole: what it started, it stops
        (up) || log "the cluster did not come up: the Slurm tests skip (or fail where R1_REQUIRE_SLURM=1)"
    fi
    "$@" || status=$?
    if [ "$started" = 1 ]; then down; fi
    return "$status"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    with) shift; with "$@" ;;
    *) echo "usage: $0 up|down|with CMD..." >&2; exit 2 ;;
esac
