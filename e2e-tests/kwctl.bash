# Helpers of e2e-tests/kwctl.bats (loaded with `load kwctl`; also sourced on its own to count
# what kwctl would run: `bash -c 'source e2e-tests/kwctl.bash; kwctl_plan e2e-tests/fixtures'`).
#
# The fixture format is read in Rust by namespace_baseline_formats::fixture; here, in shell,
# only through `fixture_jq`, for what the request and the verdict are. What the policy asks the
# cluster and what a fixture answers is not stated here: the e2e runner records the calls the
# built policy makes for each fixture and writes them as kwctl sessions
# (`e2e-runner --kwctl-sessions DIR`, formats/src/fixture/kwctl_session.rs).

# The format's defaults (e2e-tests/README.md, formats/src/fixture.rs). `//` is not used for
# booleans: it replaces `false` as well as `null`.
FIXTURE_JQ_PRELUDE='
def settings: if has("settings") and .settings != null then .settings else {} end;
def settings_valid: if (.expect | has("settingsValid")) then .expect.settingsValid else true end;
def allowed: .expect.allowed;
def message_contains: .expect.messageContains // empty;
def warnings_contain: .expect.warningsContain // [];
def kwctl_accepts_request: .request | (type == "object" and has("uid") and has("kind"));
'

# fixture_jq [jq options...] FILTER FIXTURE: the one way this file reads a fixture.
fixture_jq() {
	local filter="${*: -2:1}" fixture="${*: -1}"
	jq "${@:1:$#-2}" "$FIXTURE_JQ_PRELUDE $filter" "$fixture"
}

# Why kwctl cannot run FIXTURE at all (printed), or nothing (status 1) when it can. Such
# fixtures are "not applicable", counted apart; the e2e-runner covers them.
kwctl_not_applicable() {
	local fixture="$1"
	if [ "$(fixture_jq -r 'settings_valid and (kwctl_accepts_request | not)' "$fixture")" = "true" ]; then
		echo "kwctl refuses a request without uid/kind before the policy runs"
		return 0
	fi
	return 1
}

# For each fixture of DIR: `run NAME` or `n/a NAME: why`; then the counts.
kwctl_plan() {
	local dir="$1" fixture name why runnable=0 not_applicable=0
	for fixture in "$dir"/*.json; do
		name="$(basename "$fixture" .json)"
		if why="$(kwctl_not_applicable "$fixture")"; then
			echo "n/a $name: $why"
			not_applicable=$((not_applicable + 1))
		else
			echo "run $name"
			runnable=$((runnable + 1))
		fi
	done
	echo "kwctl would run $runnable fixtures; $not_applicable not applicable under kwctl"
}

# What the replay session SESSION (e2e-runner --kwctl-sessions) asks of kwctl: `missing` (no
# such file: validate did not run in the e2e runner), `none` (the policy read nothing: `[]`) or
# `replay` (one or more host calls, replayed in order).
kwctl_session_kind() {
	local session="$1"
	if [ ! -f "$session" ]; then
		echo missing
	elif [ "$(cat "$session")" = "[]" ]; then
		echo none
	else
		echo replay
	fi
}

# kwctl as the tests run it: offline. `run` and `bench` otherwise fetch Sigstore's TUF
# repository on every start (about 1 s, and traffic off this machine); a trust config without
# a trusted root makes kwctl skip it ("Cannot create Sigstore trust root"), which a policy
# without signature checks never needs. KWCTL_TRUST_CONFIG: that file (kwctl.bats writes it).
kwctl_offline() {
	local command="$1"
	shift
	"$KWCTL" "$command" --sigstore-trust-config "$KWCTL_TRUST_CONFIG" "$@"
}
