# shellcheck shell=bash
# A throwaway OCI registry for the tests: the CNCF distribution registry (build.sh), plain HTTP
# on 127.0.0.1 on a free port, filesystem storage in a state directory, started and stopped by
# its PID with the control plane's helpers. Source it after `set -euo pipefail`; it defines:
#   nsb_registry_start DIR [HOST:PORT CERT KEY CA]
#                            builds (or reuses) the registry, starts it with its state in DIR
#                            (an existing, empty directory) and sets NSB_REGISTRY (host:port);
#                            with HOST:PORT and a certificate, its key and the CA that signed
#                            it, it serves HTTPS there instead (the test node's registry, which
#                            its pods reach on the node's address)
#   nsb_registry_stop DIR    stops it (SIGTERM, then SIGKILL after 10 s; only that PID)
#   nsb_oras                 the path of the oras CLI (built or reused)

NSB_REGISTRY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../control-plane/lib.sh
. "$NSB_REGISTRY_DIR/../control-plane/lib.sh"
NSB_REGISTRY=""

nsb_oras() { "$NSB_REGISTRY_DIR/build.sh" oras | tail -n 1; }

nsb_registry_start() {
  local dir=$1 listen=${2:-} cert=${3:-} key=${4:-} ca=${5:-} bin port attempt i pid host tls="" scheme=http
  bin="$("$NSB_REGISTRY_DIR/build.sh" registry | tail -n 1)"
  dir="$(cd "$dir" && pwd -P)"
  mkdir -p "$dir/data"
  if [[ -n "$cert" ]]; then
    scheme=https
    tls="  tls:
    certificate: $cert
    key: $key"
  fi
  for attempt in 1 2 3 4 5; do
    if [[ -n "$listen" ]]; then
      host="${listen%:*}" port="${listen##*:}"
    else
      host=127.0.0.1 port="$(nsb_pick_ports 1)"
    fi
    cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: $host:$port
$tls
EOF
    # OTEL_TRACES_EXPORTER=none: the registry would otherwise export traces over OTLP.
    nsb_write_script "$dir/registry.sh" "$dir/registry.pid" \
      env OTEL_TRACES_EXPORTER=none "$bin" serve "$dir/config.yml"
    : >"$dir/registry.log"
    nsb_launch registry "$dir"
    pid="$(cat "$dir/registry.pid")"
    for ((i = 0; i < 100; i++)); do
      nsb_owned_pid "$pid" "$dir" || break
      if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 ${ca:+--cacert "$ca"} "$scheme://$host:$port/v2/" 2>/dev/null)" == 200 ]]; then
        NSB_REGISTRY="$host:$port"
        NSB_LOG_PREFIX=registry nsb_log "registry $("$bin" --version | awk '{print $NF}') at $scheme://$NSB_REGISTRY (pid $pid, storage $dir/data)"
        return 0
      fi
      sleep 0.05
    done
    nsb_stop registry "$dir"
    if [[ -z "$listen" ]] && grep -q 'address already in use' "$dir/registry.log" && [[ $attempt -lt 5 ]]; then
      NSB_LOG_PREFIX=registry nsb_log "registry port $port was taken, retrying with another"
      continue
    fi
    nsb_tail_log "$dir/registry.log"
    nsb_die "the registry did not answer on $scheme://$host:$port"
  done
}

nsb_registry_stop() {
  [[ -d "$1" ]] || return 0
  nsb_stop registry "$1"
}
