#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), seeding the corpora from the e2e
# fixtures; `--build-only` only builds them. Needs the nightly toolchain and cargo-fuzz
# (`make fuzz` and `make fuzz-build` install both and set FUZZ_TOOLCHAIN).
# Prints one line per target with its executions; fails on any crash.
set -euo pipefail
cd "$(dirname "$0")"
toolchain=${FUZZ_TOOLCHAIN:?FUZZ_TOOLCHAIN is not set: run make fuzz}
if [ "${1:-}" = --build-only ]; then
  exec cargo +"$toolchain" fuzz build -O
fi
seconds=${1:-60}
targets=(validate_bytes validate_mutated_fixtures settings)

seed() {
  mkdir -p corpus/validate_bytes corpus/settings corpus/validate_mutated_fixtures
  for fixture in ../e2e-tests/fixtures/*.json; do
    name=$(basename "$fixture" .json)
    jq -c '{settings, request}' "$fixture" > "corpus/validate_bytes/$name"
    jq -c '.settings' "$fixture" > "corpus/settings/$name"
  done
}

seed
cargo +"$toolchain" fuzz build -O
summary=()
for target in "${targets[@]}"; do
  echo ">> fuzzing $target for ${seconds}s"
  log=$(mktemp)
  if ! cargo +"$toolchain" fuzz run -O "$target" -- -max_total_time="$seconds" -max_len=65536 \
      -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "!! $target found a crash (see fuzz/artifacts/$target)" >&2
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  summary+=("$target: $runs executions in ${seconds}s, no crash")
  rm -f "$log"
done
printf '%s\n' "${summary[@]}"
