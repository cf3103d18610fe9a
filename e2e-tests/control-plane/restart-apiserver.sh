#!/usr/bin/env bash
# Restart only the kube-apiserver of a running control plane, with the same
# command line and port (STATE_DIR/kube-apiserver.sh); etcd keeps running.
# Waits for /readyz again and rewrites STATE_DIR/env (new NSB_APISERVER_PID).
#
# Usage: restart-apiserver.sh STATE_DIR
# Env: NSB_START_TIMEOUT (readiness timeout, s, default 60)
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -eq 1 && -n "$1" ]] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
STATE_DIR="$(cd "$1" && pwd -P)"
[[ -f "$STATE_DIR/$NSB_MARKER" && -x "$STATE_DIR/kube-apiserver.sh" && -f "$STATE_DIR/settings" ]] ||
  nsb_die "$STATE_DIR is not a control-plane state dir created by start.sh"
# shellcheck disable=SC1091
. "$STATE_DIR/settings"

T0=$(nsb_now_ms)
nsb_owned_pid "$(cat "$STATE_DIR/etcd.pid" 2>/dev/null)" "$STATE_DIR" || nsb_die "etcd is not running"
nsb_log "stopping kube-apiserver (pid $(cat "$STATE_DIR/kube-apiserver.pid" 2>/dev/null || echo none))"
nsb_stop kube-apiserver "$STATE_DIR"
nsb_log "stopped in $(nsb_elapsed "$T0"); starting it again on $NSB_APISERVER_URL"
echo "----- restarted by restart-apiserver.sh at $(date -u +%FT%TZ) -----" >>"$STATE_DIR/kube-apiserver.log"
nsb_launch kube-apiserver "$STATE_DIR"
if ! nsb_wait_apiserver "$STATE_DIR" "$NSB_APISERVER_URL" "$NSB_ADMIN_TOKEN" "${NSB_START_TIMEOUT:-60}"; then
  nsb_tail_log "$STATE_DIR/kube-apiserver.log"
  nsb_die "kube-apiserver did not become ready after restart"
fi
nsb_write_env "$STATE_DIR"
nsb_log "kube-apiserver restarted (pid $(cat "$STATE_DIR/kube-apiserver.pid")) in $(nsb_elapsed "$T0")"
