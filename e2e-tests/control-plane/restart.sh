#!/usr/bin/env bash
# Restart one component of a running control plane with the same command line, ports and
# data (STATE_DIR/<component>.sh); the other keeps running.
#   kube-apiserver: etcd must be running; waits for /readyz.
#   etcd:           waits for etcd's /health, then for the API server's /readyz (it
#                   reconnects by itself).
# Rewrites STATE_DIR/env (new NSB_APISERVER_PID / NSB_ETCD_PID).
#
# Usage: restart.sh STATE_DIR kube-apiserver|etcd
# Env: NSB_START_TIMEOUT (readiness timeout, s, default 60)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { echo "usage: $0 STATE_DIR kube-apiserver|etcd" >&2; exit 2; }
[[ $# -eq 2 && -n "$1" ]] || usage
COMPONENT="$2"
case "$COMPONENT" in kube-apiserver | etcd) ;; *) usage ;; esac
STATE_DIR="$(cd "$1" && pwd -P)"
[[ -f "$STATE_DIR/$NSB_MARKER" && -x "$STATE_DIR/$COMPONENT.sh" && -f "$STATE_DIR/settings" ]] ||
  nsb_die "$STATE_DIR is not a control-plane state dir created by start.sh"
# shellcheck disable=SC1091
. "$STATE_DIR/settings"
TIMEOUT_S="${NSB_START_TIMEOUT:-60}"

etcd_healthy() {
  local i
  for ((i = 0; i < TIMEOUT_S * 20; i++)); do
    nsb_owned_pid "$(cat "$STATE_DIR/etcd.pid")" "$STATE_DIR" || return 1
    curl -s --max-time 1 "$NSB_ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"' && return 0
    sleep 0.05
  done
  return 1
}

T0=$(nsb_now_ms)
if [[ $COMPONENT == kube-apiserver ]]; then
  nsb_owned_pid "$(cat "$STATE_DIR/etcd.pid" 2>/dev/null)" "$STATE_DIR" || nsb_die "etcd is not running"
fi
nsb_log "stopping $COMPONENT (pid $(cat "$STATE_DIR/$COMPONENT.pid" 2>/dev/null || echo none))"
nsb_stop "$COMPONENT" "$STATE_DIR"
nsb_log "stopped in $(nsb_elapsed "$T0"); starting it again"
echo "----- restarted by restart.sh at $(date -u +%FT%TZ) -----" >>"$STATE_DIR/$COMPONENT.log"
nsb_launch "$COMPONENT" "$STATE_DIR"
if [[ $COMPONENT == etcd ]]; then
  if ! etcd_healthy; then
    nsb_tail_log "$STATE_DIR/etcd.log"
    nsb_die "etcd did not become healthy after restart"
  fi
  nsb_log "etcd healthy again after $(nsb_elapsed "$T0"); waiting for kube-apiserver"
fi
if ! nsb_wait_apiserver "$STATE_DIR" "$NSB_APISERVER_URL" "$NSB_ADMIN_TOKEN" "$TIMEOUT_S"; then
  nsb_tail_log "$STATE_DIR/kube-apiserver.log"
  nsb_die "kube-apiserver did not become ready after restarting $COMPONENT"
fi
nsb_write_env "$STATE_DIR"
nsb_log "$COMPONENT restarted (pid $(cat "$STATE_DIR/$COMPONENT.pid")) in $(nsb_elapsed "$T0")"
