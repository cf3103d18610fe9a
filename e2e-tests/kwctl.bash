# Helpers of e2e-tests/kwctl.bats (loaded with `load kwctl`; also sourced on its own to count
# what kwctl would run: `bash -c 'source e2e-tests/kwctl.bash; kwctl_plan e2e-tests/fixtures'`).
#
# The fixture format is read in Rust by namespace_baseline_formats::fixture; here, in shell,
# only through `fixture_jq`, whose prelude states the same defaults.

# The field masks the policy sends with list_resources_all (src/baselines.rs), sorted as the
# SDK's BTreeSet serializes them. A replayed exchange must name the request exactly.
NSB_FIELD_MASKS="${NSB_FIELD_MASKS:-metadata.name spec.allowDNS spec.mode spec.namespaceLabel}"
# The same for the Namespace the holes check gets (NAMESPACE_FIELD_MASKS in src/baselines.rs).
NSB_NAMESPACE_FIELD_MASKS="${NSB_NAMESPACE_FIELD_MASKS:-metadata.labels metadata.name}"
# The same for a wall's NetworkPolicy the pod rule gets (NETWORK_POLICY_FIELD_MASKS there).
NSB_NETWORK_POLICY_FIELD_MASKS="${NSB_NETWORK_POLICY_FIELD_MASKS:-metadata.labels metadata.name}"

# The format's defaults (e2e-tests/README.md, formats/src/fixture.rs). `//` is not used for
# booleans: it replaces `false` as well as `null`.
FIXTURE_JQ_PRELUDE='
def settings: if has("settings") and .settings != null then .settings else {} end;
def baselines: if has("baselines") and .baselines != null then .baselines else [] end;
def settings_valid: if (.expect | has("settingsValid")) then .expect.settingsValid else true end;
def allowed: .expect.allowed;
def message_contains: .expect.messageContains // empty;
def context_aware: settings.contextAware == true;
def host_calls: if (.expect | has("hostCalls")) then .expect.hostCalls else 1 end;
def host_error: .hostError // null;
def namespaces: if has("namespaces") and .namespaces != null then .namespaces else [] end;
def warnings_contain: .expect.warningsContain // [];
def kwctl_accepts_request: .request | (type == "object" and has("uid") and has("kind"));
# The policy reads a Namespace only for a NetworkPolicy CREATE or UPDATE that opens a World or
# Cluster hole, before any list of the baselines: such fixtures state expect.hostCalls.
def reads_namespace: (.request.kind.kind? == "NetworkPolicy")
  and (.request.operation? == "CREATE" or .request.operation? == "UPDATE")
  and ((.expect.hostCalls // 0) > 0);
def list_calls: if reads_namespace then host_calls - 1 else host_calls end;
def needs_session: context_aware or reads_namespace;
def network_policies: if has("networkPolicies") and .networkPolicies != null then .networkPolicies else [] end;
# podsWaitForWall: a Pod CREATE lists the baselines, then gets the Namespace of the pod, then the
# wall of the (one, in the fixtures) Enforce baseline part by part, deny-all first:
# expect.hostCalls says how far it went.
def waits_for_wall: (.request.kind.kind? == "Pod") and (.request.operation? == "CREATE")
  and (settings.podsWaitForWall == true);
def wall_names: (baselines | map(select((.spec.mode // "Enforce") == "Enforce")) | first | .metadata.name) as $b
  | ["nsb-\($b)-default-deny", "nsb-\($b)-allow-dns"];
'

# fixture_jq [jq options...] FILTER FIXTURE: the one way this file reads a fixture.
fixture_jq() {
	local filter="${*: -2:1}" fixture="${*: -1}"
	jq "${@:1:$#-2}" "$FIXTURE_JQ_PRELUDE $filter" "$fixture"
}

# Why kwctl cannot run FIXTURE at all (printed), or nothing (status 1) when it can. Such
# fixtures are "not applicable", counted apart from skips; the e2e-runner covers them.
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

# The replay session answering the policy's host calls for FIXTURE, in the order the policy
# makes them (kwctl replays a session in order): first, when the policy reads the request's
# Namespace (reads_namespace), its get_resource, answered with the fixture's Namespace of
# that name or "not found"; then its list_resources_all calls, answered with the list of
# its baselines, once per expected list. With hostError every answer is that failure. YAML
# in flow (JSON) style; each request is the YAML form of policy-evaluator's
# CallbackRequestType, tag and all, as `--record-host-capabilities-interactions` writes it;
# an `Error` response is what kwctl 1.31 replays as a failing host call (its
# tests/data/host-capabilities-sessions).
write_session() {
	local fixture="$1" session="$2" list_request get_request masks namespace_masks
	if [ "$(fixture_jq -r 'waits_for_wall' "$fixture")" = "true" ]; then
		write_pod_session "$fixture" "$session"
		return
	fi
	# shellcheck disable=SC2086 # one mask per word
	masks="$(printf -- '- %s\n' $NSB_FIELD_MASKS)"
	# shellcheck disable=SC2086 # one mask per word
	namespace_masks="$(printf -- '- %s\n' $NSB_NAMESPACE_FIELD_MASKS)"
	list_request="$(printf '!KubernetesListResourceAll\napi_version: hedronite.io/v1alpha1\nkind: NamespaceBaseline\nlabel_selector: null\nfield_selector: null\nfield_masks:\n%s\n' "$masks")"
	get_request="$(printf '!KubernetesGetResource\napi_version: v1\nkind: Namespace\nname: %s\nnamespace: null\ndisable_cache: false\nfield_masks:\n%s\n' \
		"$(fixture_jq -r '.request.namespace // ""' "$fixture")" "$namespace_masks")"
	fixture_jq --arg list_request "$list_request" --arg get_request "$get_request" '
		{apiVersion: "hedronite.io/v1alpha1", kind: "NamespaceBaselineList",
		 metadata: {resourceVersion: "424242"}, items: baselines} as $list
		| (.request.namespace // "") as $name
		| (if host_error != null then {type: "Error", message: host_error}
		   else (namespaces | map(select(.metadata.name == $name)) | first) as $namespace
		   | if $namespace == null then {type: "Error", message: "namespaces \"\($name)\" not found"}
		     else {type: "Success", payload: ($namespace | tojson)} end
		   end) as $get_response
		| (if host_error == null then {type: "Success", payload: ($list | tojson)}
		   else {type: "Error", message: host_error} end) as $list_response
		| [if reads_namespace then {type: "Exchange", request: ($get_request + "\n"), response: $get_response} else empty end]
		  + [if context_aware then range(list_calls) | {type: "Exchange", request: ($list_request + "\n"), response: $list_response} else empty end]
	' "$fixture" >"$session"
}

# The replay session of a Pod CREATE under podsWaitForWall (waits_for_wall), in the order the
# rule calls: the list of the baselines, the pod's Namespace, then each part of the wall by
# name, answered with the fixture's NetworkPolicy or policy-evaluator's "not found" (its
# get_resource: "Cannot find <apiVersion>/<kind> named '<name>' inside of namespace
# '<Some("ns")>'"); expect.hostCalls of them. With hostError every answer is that failure.
write_pod_session() {
	local fixture="$1" session="$2" masks namespace_masks policy_masks namespace
	# shellcheck disable=SC2086 # one mask per word
	masks="$(printf -- '- %s\n' $NSB_FIELD_MASKS)"
	# shellcheck disable=SC2086 # one mask per word
	namespace_masks="$(printf -- '- %s\n' $NSB_NAMESPACE_FIELD_MASKS)"
	# shellcheck disable=SC2086 # one mask per word
	policy_masks="$(printf -- '- %s\n' $NSB_NETWORK_POLICY_FIELD_MASKS)"
	namespace="$(fixture_jq -r '.request.namespace // ""' "$fixture")"
	fixture_jq --arg masks "$masks" --arg namespace_masks "$namespace_masks" \
		--arg policy_masks "$policy_masks" --arg ns "$namespace" '
		def answer($found; $missing): if host_error != null then {type: "Error", message: host_error}
			elif $found == null then {type: "Error", message: $missing}
			else {type: "Success", payload: ($found | tojson)} end;
		def exchange($request; $response): {type: "Exchange", request: ($request + "\n"), response: $response};
		host_calls as $calls
		| ({apiVersion: "hedronite.io/v1alpha1", kind: "NamespaceBaselineList",
		  metadata: {resourceVersion: "424242"}, items: baselines}) as $list
		| [exchange("!KubernetesListResourceAll\napi_version: hedronite.io/v1alpha1\nkind: NamespaceBaseline\nlabel_selector: null\nfield_selector: null\nfield_masks:\n\($masks)";
		            answer($list; ""))]
		+ [exchange("!KubernetesGetResource\napi_version: v1\nkind: Namespace\nname: \($ns)\nnamespace: null\ndisable_cache: false\nfield_masks:\n\($namespace_masks)";
		            answer(namespaces | map(select(.metadata.name == $ns)) | first; "namespaces \"\($ns)\" not found"))]
		+ [wall_names[] as $name
		   | exchange("!KubernetesGetResource\napi_version: networking.k8s.io/v1\nkind: NetworkPolicy\nname: \($name)\nnamespace: \($ns)\ndisable_cache: false\nfield_masks:\n\($policy_masks)";
		              answer(network_policies | map(select(.metadata.name == $name and .metadata.namespace == $ns)) | first;
		                     "Cannot find networking.k8s.io/v1/NetworkPolicy named '"'"'\($name)'"'"' inside of namespace '"'"'Some(\"\($ns)\")'"'"'"))]
		| .[:$calls]
	' "$fixture" >"$session"
}
