#!/usr/bin/env bash
# Restart only the etcd of a running control plane, with the same command line, ports and
# data directory (STATE_DIR/etcd.sh); kube-apiserver keeps running and reconnects.
# Waits for etcd's /health, then for the API server's /readyz, and rewrites STATE_DIR/env
# (new NSB_ETCD_PID).
#
# Usage: restart-etcd.sh STATE_DIR
# Env: NSB_START_TIMEOUT (readiness timeout, s, default 60)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -eq 1 && -n "$1" ]] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
STATE_DIR="$(cd "$1" && pwd -P)"
[[ -f "$STATE_DIR/$NSB_MARKER" && -x "$STATE_DIR/etcd.sh" && -f "$STATE_DIR/settings" ]] ||
  nsb_die "$STATE_DIR is not a control-plane state dir created by start.sh"
# shellcheck disable=SC1091
. "$STATE_DIR/settings"
TIMEOUT_S="${NSB_START_TIMEOUT:-60}"

T0=$(nsb_now_ms)
nsb_log "stopping etcd (pid $(cat "$STATE_DIR/etcd.pid" 2>/dev/null || echo none))"
nsb_stop etcd "$STATE_DIR"
nsb_log "stopped in $(nsb_elapsed "$T0"); starting it again on $NSB_ETCD_URL"
echo "----- restarted by restart-etcd.sh at $(date -u +%FT%TZ) -----" >>"$STATE_DIR/etcd.log"
nsb_launch etcd "$STATE_DIR"
healthy=0
for ((i = 0; i < TIMEOUT_S * 20; i++)); do
  nsb_owned_pid "$(cat "$STATE_DIR/etcd.pid")" "$STATE_DIR" || break
  if curl -s --max-time 1 "$NSB_ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"'; then
    healthy=1
    break
  fi
  sleep 0.05
done
if [[ $healthy != 1 ]]; then
  nsb_tail_log "$STATE_DIR/etcd.log"
  nsb_die "etcd did not become healthy after restart"
fi
nsb_log "etcd healthy again after $(nsb_elapsed "$T0"); waiting for kube-apiserver"
if ! nsb_wait_apiserver "$STATE_DIR" "$NSB_APISERVER_URL" "$NSB_ADMIN_TOKEN" "$TIMEOUT_S"; then
  nsb_tail_log "$STATE_DIR/kube-apiserver.log"
  nsb_die "kube-apiserver did not become ready after the etcd restart"
fi
nsb_write_env "$STATE_DIR"
nsb_log "etcd restarted (pid $(cat "$STATE_DIR/etcd.pid")) in $(nsb_elapsed "$T0")"
