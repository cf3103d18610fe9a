#!/usr/bin/env bash
# Stop the etcd + kube-apiserver started by start.sh, by the PIDs in STATE_DIR
# (SIGTERM, up to 10 s, then SIGKILL), then remove STATE_DIR unless KEEP_STATE=1.
#
# Usage: [KEEP_STATE=1] stop.sh STATE_DIR
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -eq 1 && -n "$1" ]] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
[[ -d "$1" ]] || { nsb_log "state dir $1 does not exist, nothing to stop"; exit 0; }
STATE_DIR="$(cd "$1" && pwd -P)"
[[ -f "$STATE_DIR/$NSB_MARKER" ]] || nsb_die "$STATE_DIR was not created by start.sh (no $NSB_MARKER), refusing"

nsb_stop kube-apiserver "$STATE_DIR"
nsb_stop etcd "$STATE_DIR"

if [[ "${KEEP_STATE:-0}" == 1 ]]; then
  nsb_log "stopped; state kept in $STATE_DIR"
else
  rm -rf "$STATE_DIR"
  nsb_log "stopped; removed $STATE_DIR"
fi
