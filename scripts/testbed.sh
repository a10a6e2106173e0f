#!/usr/bin/env bash
# A multi-host testbed on one machine: N+1 hosts as network namespaces on a
# bridge, for benchmarks and fault tests that must cross a network.
#
#   scripts/testbed.sh up N [--bw MBIT [--bw-hosts w1,...]] [--trainer-bw MBIT] [--cpu CORES]
#                           [--trainer-cpu CORES]
#                                                       trainer + workers w1..wN
#   scripts/testbed.sh exec HOST CMD [ARGS...]          run CMD on HOST (trainer, w1, ...)
#   scripts/testbed.sh addr HOST                        print HOST's address
#   scripts/testbed.sh status | down
#
# Hosts get 10.77.0.1 (trainer) and 10.77.0.11, .12, ... (workers) on bridge
# pfbr0. --bw limits each worker's egress (what it sends the trainer) with a
# token bucket (only those in --bw-hosts, when given); --trainer-bw limits what reaches the trainer from all of them
# together (its ingest link: a token bucket where the bridge sends to it);
# --cpu caps each worker's CPU with a cgroup (v1 cpu or v2)
# quota. Needs root (ip netns, tc); prints "testbed: unavailable: ..." and
# exits 77 where that is not allowed, so callers can skip.
set -euo pipefail

prefix=pf
bridge=pfbr0
subnet=10.77.0
state=/run/prepflow-testbed

die() { echo "testbed: $*" >&2; exit 1; }
unavailable() { echo "testbed: unavailable: $*" >&2; exit 77; }

host_addr() {
  case "$1" in
    trainer) echo "$subnet.1" ;;
    w[0-9]*) echo "$subnet.$((10 + ${1#w}))" ;;
    *) die "unknown host '$1' (trainer, w1, w2, ...)" ;;
  esac
}

cgroup_dir() {
  if [ -d /sys/fs/cgroup/cpu ]; then echo "/sys/fs/cgroup/cpu/prepflow-$1"
  else echo "/sys/fs/cgroup/prepflow-$1"; fi
}

set_cpu_quota() {  # host cores
  local dir; dir=$(cgroup_dir "$1")
  mkdir -p "$dir" || return 1
  local quota; quota=$(awk -v c="$2" 'BEGIN { printf "%d", c * 100000 }')
  if [ -f "$dir/cpu.cfs_quota_us" ]; then
    echo 100000 >"$dir/cpu.cfs_period_us" && echo "$quota" >"$dir/cpu.cfs_quota_us"
  else
    echo "$quota 100000" >"$dir/cpu.max"
  fi
}

cmd_up() {
  local n=${1:-}; shift || true
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || die "usage: testbed.sh up N [--bw MBIT] [--cpu CORES]"
  local bw="" cpu="" trainer_cpu="" trainer_bw="" bw_hosts=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --bw) bw=$2; shift ;;
      --cpu) cpu=$2; shift ;;
      --trainer-cpu) trainer_cpu=$2; shift ;;
      --trainer-bw) trainer_bw=$2; shift ;;
      --bw-hosts) bw_hosts=$2; shift ;;
      *) die "unknown flag '$1'" ;;
    esac
    shift
  done
  [ "$(id -u)" -eq 0 ] || unavailable "needs root"
  ip netns add "${prefix}-probe" 2>/dev/null || unavailable "cannot create network namespaces"
  ip netns del "${prefix}-probe"
  cmd_down >/dev/null 2>&1 || true
  mkdir -p "$state"
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  local hosts=(trainer)
  for i in $(seq 1 "$n"); do hosts+=("w$i"); done
  for h in "${hosts[@]}"; do
    local ns="${prefix}-$h" addr; addr=$(host_addr "$h")
    ip netns add "$ns"
    ip link add "${prefix}-$h-br" type veth peer name "${prefix}-$h-ns"
    ip link set "${prefix}-$h-br" master "$bridge" up
    ip link set "${prefix}-$h-ns" netns "$ns"
    ip -n "$ns" link set "${prefix}-$h-ns" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [ "$h" != trainer ] && [ -n "$bw" ] && { [ -z "$bw_hosts" ] || [[ ",$bw_hosts," == *",$h,"* ]]; }; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "${bw}mbit" burst 256kb latency 50ms
    fi
    if [ "$h" = trainer ] && [ -n "$trainer_bw" ]; then
      tc qdisc add dev "${prefix}-$h-br" root tbf rate "${trainer_bw}mbit" burst 256kb latency 50ms
    fi
    local quota=$cpu
    [ "$h" = trainer ] && quota=$trainer_cpu
    if [ -n "$quota" ]; then
      set_cpu_quota "$h" "$quota" || echo "testbed: warning: no CPU quota for $h (cgroups unavailable)" >&2
    fi
    echo "$h $addr" >>"$state/hosts"
  done
  echo "testbed: up: trainer $(host_addr trainer)${trainer_cpu:+ (cpu ${trainer_cpu} cores)}${trainer_bw:+ (ingest ${trainer_bw} Mbit/s)}, workers $(for i in $(seq 1 "$n"); do printf '%s ' "$(host_addr "w$i")"; done)${bw:+(egress ${bw} Mbit/s) }${cpu:+(cpu ${cpu} cores)}"
}

cmd_exec() {
  local h=${1:-}; shift || die "usage: testbed.sh exec HOST CMD..."
  [ $# -gt 0 ] || die "usage: testbed.sh exec HOST CMD..."
  ip netns list | grep -q "^${prefix}-$h\b" || die "no host '$h' (is the testbed up?)"
  local dir; dir=$(cgroup_dir "$h")
  local ver=v1; [ -f /sys/fs/cgroup/cgroup.controllers ] && ver=v2
  # `ip netns exec` remounts /sys, which hides /sys/fs/cgroup; mount the CPU
  # hierarchy again inside the host's private mount namespace so a process
  # can read its own quota, as it could on a real machine or in a container.
  local inner='if [ -z "$(ls -A /sys/fs/cgroup 2>/dev/null)" ]; then
      if [ "$1" = v2 ]; then mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null
      else mount -t tmpfs none /sys/fs/cgroup 2>/dev/null && mkdir -p /sys/fs/cgroup/cpu &&
           mount -t cgroup -o cpu none /sys/fs/cgroup/cpu 2>/dev/null; fi
    fi; shift; exec "$@"'
  if [ -d "$dir" ]; then
    # Join the host's cgroup, then enter its namespace.
    exec bash -c 'echo $$ >"$1/cgroup.procs"; shift; exec ip netns exec "$@"' _ "$dir" \
      "${prefix}-$h" bash -c "$inner" _ "$ver" "$@"
  fi
  exec ip netns exec "${prefix}-$h" bash -c "$inner" _ "$ver" "$@"
}

cmd_down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${prefix}-" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  done
  ip link del "$bridge" 2>/dev/null || true
  for d in /sys/fs/cgroup/cpu/prepflow-* /sys/fs/cgroup/prepflow-*; do
    [ -d "$d" ] && rmdir "$d" 2>/dev/null || true
  done
  rm -rf "$state"
  echo "testbed: down"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  addr) host_addr "${2:?usage: testbed.sh addr HOST}" ;;
  status) [ -f "$state/hosts" ] && cat "$state/hosts" || echo "testbed: down" ;;
  down) cmd_down ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
