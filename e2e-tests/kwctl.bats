#!/usr/bin/env bats
# Runs the fixtures of e2e-tests/fixtures through `kwctl run` (Kubewarden's kwctl 1.35), the
# way a policy author checks a policy before publishing it. The same fixtures run in the
# e2e-runner (a waPC host built like the policy-server); this file checks that kwctl, which
# embeds the policy-server's own evaluator, reaches the same verdicts.
#
#   make e2e-tests                               # what CI runs: e2e-runner, then this file
#   bats e2e-tests/kwctl.bats                    # from the repository root, after make policy.wasm
#
# Environment (all optional): KWCTL (else e2e-tests/kubewarden/install.sh finds or installs
# kwctl 1.35.0; without it every test fails, saying how to get it), POLICY_WASM (default
# policy.wasm), ANNOTATED_WASM (default: this file runs `kwctl annotate` on POLICY_WASM with
# metadata.yml), KWCTL_SESSIONS (the directory `e2e-runner --kwctl-sessions` wrote; default:
# this file runs the e2e runner itself), FIXTURES_DIR.
#
# Each fixture whose policy reads the cluster runs against the annotated module (kwctl grants
# a policy only the contextAwareResources of its metadata) with --allow-context-aware and
# --replay-host-capabilities-interactions: the session the e2e runner recorded from the built
# policy for that fixture. kwctl compares every request the policy sends with the session's
# ("Replay error: unexpected request" otherwise), and a session left half-replayed fails too.
#
# One test per decision family (bats cannot generate tests); each loops over the fixtures
# whose file name starts with the family's prefix and reports every mismatch before failing.
# The last test prints how many fixtures ran, passed, failed, and were not applicable under
# kwctl. Nothing is skipped. Helpers: e2e-tests/kwctl.bash.

load kwctl

# kwctl appends a Rust backtrace to a guest error's output when these are set, and the
# fixtures compare that output (holes-host-error-*): run kwctl as a user's shell would.
unset RUST_BACKTRACE RUST_LIB_BACKTRACE

FAMILIES=(policy-delete policy-update policy-create namespace exempt not-exempt odd dry-run ca settings bypass holes pods)

setup_file() {
	E2E_DIR="$(cd "$(dirname "$BATS_TEST_FILENAME")" && pwd)"
	ROOT="$(cd "$E2E_DIR/.." && pwd)"
	export E2E_DIR
	export FIXTURES_DIR="${FIXTURES_DIR:-$E2E_DIR/fixtures}"
	command -v jq >/dev/null || {
		echo "jq not found: e2e-tests/setup.sh installs it (apt-get install jq)" >&2
		return 1
	}
	# The install script says what to do when it cannot find kwctl.
	KWCTL="$("$E2E_DIR/kubewarden/install.sh" kwctl)"
	export KWCTL
	echo "# $("$KWCTL" --version | head -n 1) ($KWCTL)" >&3
	export KWCTL_TRUST_CONFIG="$BATS_FILE_TMPDIR/sigstore-trust-config.json"
	echo '{}' >"$KWCTL_TRUST_CONFIG"

	export POLICY_WASM="${POLICY_WASM:-policy.wasm}"
	[ -f "$POLICY_WASM" ] || {
		echo "policy module $POLICY_WASM not found: run make policy.wasm (or set POLICY_WASM)" >&2
		return 1
	}
	if [ -z "${ANNOTATED_WASM:-}" ]; then
		ANNOTATED_WASM="$BATS_FILE_TMPDIR/annotated-policy.wasm"
		"$KWCTL" annotate "$POLICY_WASM" --metadata-path "$ROOT/metadata.yml" --output-path "$ANNOTATED_WASM"
	fi
	export ANNOTATED_WASM
	if [ -z "${KWCTL_SESSIONS:-}" ]; then
		KWCTL_SESSIONS="$BATS_FILE_TMPDIR/sessions"
		# Its verdicts are make e2e-tests' first step; here only the sessions matter.
		(cd "$ROOT" && cargo run -q --locked -p namespace-baseline-e2e --bin e2e-runner -- \
			--wasm "$(realpath "$POLICY_WASM")" --fixtures "$FIXTURES_DIR" --kwctl-sessions "$KWCTL_SESSIONS") \
			>"$BATS_FILE_TMPDIR/e2e-runner.log" 2>&1 || true
		ls "$KWCTL_SESSIONS"/*.yml >/dev/null 2>&1 || {
			echo "the e2e runner wrote no kwctl session:" >&2
			tail -n 20 "$BATS_FILE_TMPDIR/e2e-runner.log" >&2
			return 1
		}
	fi
	export KWCTL_SESSIONS
	# One line per family: "family passed failed not-applicable"; one line per fixture run with
	# a replayed session.
	export TALLY="$BATS_FILE_TMPDIR/tally" REPLAYED="$BATS_FILE_TMPDIR/replayed"
	: >"$TALLY"
	: >"$REPLAYED"
}

# Checks one fixture; prints why on a mismatch. Returns 0 (pass), 1 (fail) or
# 4 (not applicable under kwctl).
check_fixture() {
	local fixture="$1" name work settings request session out err status why
	name="$(basename "$fixture" .json)"
	work="$BATS_TEST_TMPDIR/$name"
	mkdir -p "$work"
	settings="$work/settings.json"
	request="$work/request.json"
	out="$work/stdout"
	err="$work/stderr"

	if why="$(kwctl_not_applicable "$fixture")"; then
		echo "n/a $name: $why (the e2e-runner covers it)"
		return 4
	fi

	fixture_jq 'settings' "$fixture" >"$settings"
	# Settings-only fixtures carry no request; kwctl still wants one to run.
	fixture_jq '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
	     request: (.request // {uid: "settings-check",
	                            kind: {group: "", version: "v1", kind: "Namespace"},
	                            resource: {group: "", version: "v1", resource: "namespaces"},
	                            operation: "UPDATE", name: "x", namespace: "x",
	                            userInfo: {username: "settings-check"}})}' "$fixture" >"$request"

	local wasm="$POLICY_WASM" kind
	local args=(--settings-path "$settings" --request-path "$request")
	session="$KWCTL_SESSIONS/$name.yml"
	kind="$(kwctl_session_kind "$session")"
	# The e2e runner calls validate, and so writes a session, unless the settings are refused.
	if [ "$kind" = missing ] && [ "$(fixture_jq -r 'settings_valid' "$fixture")" = "true" ]; then
		echo "FAIL $name: no kwctl session $session (e2e-runner --kwctl-sessions writes one for every fixture whose validate runs)"
		return 1
	fi
	if [ "$kind" = replay ]; then
		wasm="$ANNOTATED_WASM"
		args+=(--allow-context-aware --replay-host-capabilities-interactions "$session")
		echo "$name" >>"$REPLAYED"
	fi

	status=0
	kwctl_offline run "${args[@]}" "$wasm" >"$out" 2>"$err" || status=$?
	# kwctl only warns when the policy made fewer calls than the session holds.
	if grep -q 'recorded exchanges have not been replayed' "$err"; then
		echo "FAIL $name: the policy did not make every call of $session under kwctl: $(grep 'not been replayed' "$err" | tail -n 1 | cut -c 1-400)"
		return 1
	fi

	local want_contains
	want_contains="$(fixture_jq -r 'message_contains' "$fixture")"

	if [ "$(fixture_jq -r 'settings_valid' "$fixture")" = "false" ]; then
		# kwctl validates the settings before it evaluates: refused settings end the run
		# with a non-zero exit and the policy's message.
		if [ "$status" -eq 0 ]; then
			echo "FAIL $name: settings accepted (exit 0), expected refused: $(tail -n 3 "$out")"
			return 1
		fi
		if [ -n "$want_contains" ] && ! grep -qF -- "$want_contains" "$out" "$err"; then
			echo "FAIL $name: settings refused (exit $status) without \"$want_contains\": $(cat "$err" "$out")"
			return 1
		fi
		return 0
	fi

	if [ "$status" -ne 0 ]; then
		echo "FAIL $name: kwctl exited $status: $(tail -n 5 "$err")"
		return 1
	fi
	# kwctl prints the AdmissionResponse (older releases wrap it in an AdmissionReview).
	local response allowed message want_allowed
	response="$(grep '^{' "$out" | tail -n 1)"
	allowed="$(jq -r '(.response // .) | .allowed' <<<"$response")"
	message="$(jq -r '(.response // .) | .status.message // .message // empty' <<<"$response")"
	want_allowed="$(fixture_jq -r 'allowed' "$fixture")"
	if [ "$allowed" != "$want_allowed" ]; then
		echo "FAIL $name: allowed=$allowed, expected $want_allowed (message: $message)"
		return 1
	fi
	if [ -n "$want_contains" ] && [[ "$message" != *"$want_contains"* ]]; then
		echo "FAIL $name: message \"$message\" does not contain \"$want_contains\""
		return 1
	fi
	if [ -z "$want_contains" ] && [ "$allowed" = "true" ] && [ -n "$message" ]; then
		echo "FAIL $name: an accepted request carries a message: $message"
		return 1
	fi
	# One expected substring per warning, in order; none expected: no warning.
	local warnings want_warnings
	warnings="$(jq -c '(.response // .) | .warnings // []' <<<"$response")"
	want_warnings="$(fixture_jq -c 'warnings_contain' "$fixture")"
	if [ "$(jq -n --argjson got "$warnings" --argjson want "$want_warnings" \
		'($got | length) == ($want | length) and ([range($want | length) as $i | $got[$i] | contains($want[$i])] | all)')" != "true" ]; then
		echo "FAIL $name: warnings $warnings do not match the expected $want_warnings (one substring per warning, in order)"
		return 1
	fi
	return 0
}

# Runs every fixture of a family; fails listing each mismatch.
run_family() {
	local prefix="$1" fixture line rc passed=0 failed=0 not_applicable=0
	local -a report=()
	shopt -s nullglob
	local -a files=("$FIXTURES_DIR/$prefix"-*.json)
	shopt -u nullglob
	if [ "${#files[@]}" -eq 0 ]; then
		echo "no fixture named $prefix-*.json in $FIXTURES_DIR"
		return 1
	fi
	for fixture in "${files[@]}"; do
		rc=0
		line="$(check_fixture "$fixture")" || rc=$?
		report+=("$line")
		case "$rc" in
		0) passed=$((passed + 1)) ;;
		4) not_applicable=$((not_applicable + 1)) ;;
		*) failed=$((failed + 1)) ;;
		esac
	done
	echo "$prefix $passed $failed $not_applicable" >>"$TALLY"
	printf '%s\n' "${report[@]}" | sed '/^$/d'
	echo "$prefix: $passed passed, $failed failed, $not_applicable not applicable"
	[ "$failed" -eq 0 ]
}

@test "every fixture belongs to a family" {
	local fixture name family found
	local -a orphans=()
	for fixture in "$FIXTURES_DIR"/*.json; do
		name="$(basename "$fixture")"
		found=no
		for family in "${FAMILIES[@]}"; do
			case "$name" in "$family"-*) found=yes ;; esac
		done
		[ "$found" = yes ] || orphans+=("$name")
	done
	if [ "${#orphans[@]}" -ne 0 ]; then
		echo "fixtures no family test runs: ${orphans[*]}"
		return 1
	fi
}

@test "DELETE of managed NetworkPolicies (policy-delete-*)" {
	run_family policy-delete
}

@test "UPDATE of managed and unmanaged NetworkPolicies (policy-update-*)" {
	run_family policy-update
}

@test "CREATE of NetworkPolicies claiming management (policy-create-*)" {
	run_family policy-create
}

@test "Namespace label changes against settings guards (namespace-*)" {
	run_family namespace
}

@test "exempt identities (exempt-*)" {
	run_family exempt
}

@test "identities that are not exempt (not-exempt-*)" {
	run_family not-exempt
}

@test "malformed and unguarded requests are allowed (odd-*)" {
	run_family odd
}

@test "dry-run requests get the real verdict (dry-run-*)" {
	run_family dry-run
}

@test "context-aware mode with replayed NamespaceBaselines (ca-*)" {
	run_family ca
}

@test "settings validation (settings-*)" {
	run_family settings
}

@test "the bypass catalogue: every known way around the wall (bypass-*)" {
	run_family bypass
}

@test "NetworkPolicies that open the wall of a walled namespace (holes-*)" {
	run_family holes
}

@test "Pod CREATEs that wait for their namespace's wall (pods-*)" {
	run_family pods
}

@test "summary: every fixture ran through kwctl, or is not applicable" {
	local ran passed failed not_applicable fixtures replayed
	read -r passed failed not_applicable < <(awk '{p += $2; f += $3; n += $4} END {print p+0, f+0, n+0}' "$TALLY")
	ran=$((passed + failed))
	fixtures="$(find "$FIXTURES_DIR" -maxdepth 1 -name '*.json' | wc -l)"
	replayed="$(sort -u "$REPLAYED" | wc -l)"
	echo "# kwctl.bats: $ran fixtures ran through kwctl ($passed passed, $failed failed; $replayed with a replayed host-call session), $not_applicable not applicable under kwctl, of $fixtures" >&3
	if [ "$(wc -l <"$TALLY")" -ne "${#FAMILIES[@]}" ]; then
		echo "only $(wc -l <"$TALLY") of ${#FAMILIES[@]} families ran (a filter, or a family test stopped early)"
		return 1
	fi
	[ "$((ran + not_applicable))" -eq "$fixtures" ]
	[ "$replayed" -gt 0 ]
	[ "$failed" -eq 0 ]
}
