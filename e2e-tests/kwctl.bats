#!/usr/bin/env bats
# Runs the fixtures of e2e-tests/fixtures through `kwctl run`, the way a policy author checks
# a policy before publishing it. The same fixtures run in the e2e-runner (a waPC host built
# like the policy-server); this file checks that kwctl reaches the same verdicts.
#
#   bats e2e-tests/kwctl.bats                    # from the repository root
#   POLICY_WASM=path/to/policy.wasm bats e2e-tests/kwctl.bats
#
# One test per decision family (bats cannot generate tests); each loops over the fixtures
# whose file name starts with the family's prefix and reports every mismatch before failing.
# The last test prints how many fixtures ran, passed, failed, were skipped, and were not
# applicable under kwctl, and fails if any fixture kwctl could run was skipped. Without kwctl
# on PATH the kwctl tests are skipped (and say so); the family check runs anyway. Helpers:
# e2e-tests/kwctl.bash.

load kwctl

# kwctl appends a Rust backtrace to a guest error's output when these are set, and the
# fixtures compare that output (holes-host-error-*): run kwctl as a user's shell would.
unset RUST_BACKTRACE RUST_LIB_BACKTRACE

FAMILIES=(policy-delete policy-update policy-create namespace exempt not-exempt odd dry-run ca settings bypass holes pods)

setup_file() {
	E2E_DIR="$(cd "$(dirname "$BATS_TEST_FILENAME")" && pwd)"
	export E2E_DIR
	export FIXTURES_DIR="${FIXTURES_DIR:-$E2E_DIR/fixtures}"
	if [ -z "${POLICY_WASM:-}" ]; then
		# The annotated module carries metadata.yml (contextAwareResources), which
		# --allow-context-aware needs; the plain module is enough for everything else.
		if [ -f annotated-policy.wasm ]; then
			POLICY_WASM=annotated-policy.wasm
		else
			POLICY_WASM=policy.wasm
		fi
	fi
	export POLICY_WASM
	# kwctl grants a policy only the contextAwareResources of its metadata, which only the
	# annotated module carries: the context-aware fixtures run against that one.
	export ANNOTATED_WASM="${ANNOTATED_WASM:-annotated-policy.wasm}"
	# One line per family: "family passed failed skipped not-applicable".
	export TALLY="$BATS_FILE_TMPDIR/tally"
	: >"$TALLY"
}

# The tests that run kwctl skip without it (and say so); the family check needs no kwctl.
need_kwctl() {
	if ! command -v kwctl >/dev/null 2>&1; then
		skip "kwctl not found"
	fi
	if ! command -v jq >/dev/null 2>&1; then
		echo "jq not found: e2e-tests/setup.sh installs it" >&2
		return 1
	fi
	if [ ! -f "$POLICY_WASM" ]; then
		echo "policy module $POLICY_WASM not found: run make (or set POLICY_WASM)" >&2
		return 1
	fi
}

# Checks one fixture; prints why on a mismatch. Returns 0 (pass), 1 (fail), 3 (skipped: a
# fixture kwctl could run was not run; reason printed) or 4 (not applicable under kwctl).
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

	local wasm="$POLICY_WASM"
	local args=(run --settings-path "$settings" --request-path "$request")
	if [ "$(fixture_jq -r 'needs_session' "$fixture")" = "true" ]; then
		if [ ! -f "$ANNOTATED_WASM" ]; then
			echo "SKIPPED $name: fixtures that read the cluster need $ANNOTATED_WASM (make annotated-policy.wasm): kwctl only grants the contextAwareResources of metadata.yml"
			return 3
		fi
		wasm="$ANNOTATED_WASM"
		session="$work/session.yml"
		write_session "$fixture" "$session"
		args+=(--allow-context-aware --replay-host-capabilities-interactions "$session")
	fi

	status=0
	kwctl "${args[@]}" "$wasm" >"$out" 2>"$err" || status=$?

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

# Runs every fixture of a family; fails listing each mismatch, and when a fixture kwctl
# could run was skipped.
run_family() {
	need_kwctl
	local prefix="$1" fixture line rc passed=0 failed=0 skipped=0 not_applicable=0
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
		3) skipped=$((skipped + 1)) ;;
		4) not_applicable=$((not_applicable + 1)) ;;
		*) failed=$((failed + 1)) ;;
		esac
	done
	echo "$prefix $passed $failed $skipped $not_applicable" >>"$TALLY"
	printf '%s\n' "${report[@]}" | sed '/^$/d'
	echo "$prefix: $passed passed, $failed failed, $skipped skipped, $not_applicable not applicable"
	[ "$failed" -eq 0 ] && [ "$skipped" -eq 0 ]
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

@test "summary: every fixture kwctl can run ran" {
	need_kwctl
	local ran passed failed skipped not_applicable
	read -r passed failed skipped not_applicable < <(awk '{p += $2; f += $3; s += $4; n += $5} END {print p+0, f+0, s+0, n+0}' "$TALLY")
	ran=$((passed + failed))
	echo "kwctl.bats: $ran fixtures ran ($passed passed, $failed failed), $skipped skipped, $not_applicable not applicable under kwctl" >&3
	echo "kwctl: $passed passed, $failed failed, $skipped skipped" >&3
	if [ "$(wc -l <"$TALLY")" -ne "${#FAMILIES[@]}" ]; then
		echo "only $(wc -l <"$TALLY") of ${#FAMILIES[@]} families ran (a filter, or a family test stopped early)"
	fi
	[ "$ran" -gt 0 ]
	[ "$skipped" -eq 0 ]
	[ "$failed" -eq 0 ]
}
