#!/usr/bin/env bash
# Stop the test node started by start.sh, by the PIDs in STATE_DIR, and remove what it made:
# the node's processes (kubelet, kube-proxy, kube-router, containerd, the controllers), every
# container process (the pods' cgroup tree), containerd's shims, the control plane, then the
# holder of the node's network and mount namespaces (its bridge, veths, nftables/iptables
# rules, mounts and the pods' network namespaces go with them), the pods' cgroups, and the
# state dir unless KEEP_STATE=1. Safe to run twice, or on a half-started node.
#
# Usage: [KEEP_STATE=1] stop.sh STATE_DIR
# No `set -e`: a step that fails (a process already gone, a cgroup vanishing while read) must
# not stop the rest of the teardown.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NSB_LOG_PREFIX=node
# shellcheck source=lib.sh
. "$HERE/lib.sh"

[[ $# -eq 1 && -n "$1" ]] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
[[ -d "$1" ]] || { nsb_log "state dir $1 does not exist, nothing to stop"; exit 0; }
STATE_DIR="$(cd "$1" && pwd -P)"
[[ -f "$STATE_DIR/$NSB_NODE_MARKER" ]] || nsb_die "$STATE_DIR was not created by node/start.sh (no $NSB_NODE_MARKER), refusing"
T0=$(nsb_now_ms)
CGROUP_ROOT=""
# shellcheck disable=SC1091
[[ -f "$STATE_DIR/settings" ]] && . "$STATE_DIR/settings" && CGROUP_ROOT="${NSB_CGROUP_ROOT:-}"

# The node's agents first, so that nothing restarts a container while they go.
for name in kubelet kube-router kube-proxy kube-scheduler kube-controller-manager; do
  nsb_stop "$name" "$STATE_DIR"
done

# Every container process: whatever is in the pods' cgroup tree (they all are ours).
kill_cgroup_tree() {
  local sig=$1 f pid
  [[ -n "$CGROUP_ROOT" && -d "/sys/fs/cgroup/pids$CGROUP_ROOT" ]] || return 0
  while IFS= read -r f; do
    while IFS= read -r pid; do
      [[ -n "$pid" ]] && kill "-$sig" "$pid" 2>/dev/null || true
    done < <(cat "$f" 2>/dev/null)
  done < <(find "/sys/fs/cgroup/pids$CGROUP_ROOT" -name cgroup.procs 2>/dev/null)
}
cgroup_tree_empty() {
  [[ -n "$CGROUP_ROOT" && -d "/sys/fs/cgroup/pids$CGROUP_ROOT" ]] || return 0
  ! find "/sys/fs/cgroup/pids$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null | grep >/dev/null .
}
kill_cgroup_tree TERM
for ((i = 0; i < 50; i++)); do cgroup_tree_empty && break; sleep 0.1; done
kill_cgroup_tree KILL
for ((i = 0; i < 50; i++)); do cgroup_tree_empty && break; sleep 0.1; done
cgroup_tree_empty || nsb_log "WARNING: processes left in the cgroup $CGROUP_ROOT"

nsb_stop containerd "$STATE_DIR"

# Processes whose command line names the state dir: containerd's shims (-address
# STATE_DIR/...) and anything else this node started. Each is checked by nsb_owned_pid.
own_processes() {
  local p
  for p in /proc/[0-9]*; do
    p="${p#/proc/}"
    [[ $p == "$$" || $p == "$BASHPID" || $p == "$PPID" ]] && continue
    nsb_owned_pid "$p" "$STATE_DIR" && echo "$p"
  done
}
holder="$(cat "$STATE_DIR/holder.pid" 2>/dev/null || true)"
for p in $(own_processes); do
  [[ "$p" == "$holder" ]] && continue
  kill -TERM "$p" 2>/dev/null || true
done
sleep 0.2
for p in $(own_processes); do
  [[ "$p" == "$holder" ]] && continue
  kill -KILL "$p" 2>/dev/null || true
done

# The control plane (it ran in the node's network namespace).
if [[ -f "$STATE_DIR/cp/.nsb-control-plane" ]]; then
  KEEP_STATE=1 "$HERE/../control-plane/stop.sh" "$STATE_DIR/cp" >/dev/null 2>&1 ||
    nsb_log "WARNING: control-plane stop.sh failed for $STATE_DIR/cp"
fi

# Anything still in the node's network namespace (identified by the holder's) is ours.
if [[ -n "$holder" ]] && nsb_owned_pid "$holder" "$STATE_DIR"; then
  netns="$(readlink "/proc/$holder/ns/net" 2>/dev/null || true)"
  if [[ -n "$netns" ]]; then
    for p in /proc/[0-9]*; do
      p="${p#/proc/}"
      [[ "$p" == "$holder" ]] && continue
      [[ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" == "$netns" ]] || continue
      nsb_log "killing pid $p left in the node's network namespace: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null)"
      kill -KILL "$p" 2>/dev/null || true
    done
  fi
  nsb_stop holder "$STATE_DIR"
fi

# The pods' cgroups, deepest first.
if [[ -n "$CGROUP_ROOT" ]]; then
  for c in $(nsb_cgroup_controllers); do
    [[ -d "/sys/fs/cgroup/$c$CGROUP_ROOT" ]] || continue
    find "/sys/fs/cgroup/$c$CGROUP_ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [[ -d "/sys/fs/cgroup/$c$CGROUP_ROOT" ]] && nsb_log "WARNING: could not remove /sys/fs/cgroup/$c$CGROUP_ROOT"
  done
fi

if [[ "${KEEP_STATE:-0}" == 1 ]]; then
  nsb_log "stopped in $(nsb_elapsed "$T0"); state kept in $STATE_DIR"
else
  rm -rf "$STATE_DIR"
  nsb_log "stopped in $(nsb_elapsed "$T0"); removed $STATE_DIR"
fi
