# Sourced by the testbed benchmarks (scripts/bench_*.sh): what they share.

# start_workers WORK DATA "HOSTS" [FLAGS...]: a prepflow-worker on each
# testbed host (flags added to its own), logging to WORK/<host>.err. Sets
# `workers` (host:port,... as --workers takes it) and `worker_pids`.
start_workers() {
  local work=$1 data=$2 hosts=$3 w
  shift 3
  workers="" worker_pids=""
  for w in $hosts; do
    rm -f "$work/$w.port"
    scripts/testbed.sh exec "$w" build/bin/prepflow-worker --listen "$(scripts/testbed.sh addr "$w")" \
      --insecure --data-root "$data" --port-file "$work/$w.port" "$@" >/dev/null 2>>"$work/$w.err" &
    worker_pids="$worker_pids $!"
  done
  for w in $hosts; do
    for _ in $(seq 100); do [ -s "$work/$w.port" ] && break; sleep 0.1; done
    if [ ! -s "$work/$w.port" ]; then
      echo "the worker on $w did not start: $(tail -n 3 "$work/$w.err")" >&2
      return 1
    fi
    workers="${workers:+$workers,}$(scripts/testbed.sh addr "$w"):$(cat "$work/$w.port")"
  done
}
