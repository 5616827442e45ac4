#!/usr/bin/env bash
# fuzz.sh runs every Go native fuzz test of the module for a short time
# each (FUZZTIME, default 10s), on top of the checked-in seed corpora under
# <package>/testdata/fuzz that plain `go test` already replays. CI runs it
# (`make test`, FUZZTIME=5s); a failure leaves the crashing input in
# testdata/fuzz to commit with the fix.
#
#   hack/fuzz.sh                 # every package
#   hack/fuzz.sh ./pkg/peering/...
#
# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
# failure ("context deadline exceeded", no input written): it compares the
# parent context's error with the child's while the cancel is half done
# (go.dev/issue/75804, fixed in Go 1.27). A run that fails that way and
# wrote no failing input is run once more for as many inputs as it had
# reached (-fuzztime Nx): a count has no deadline, so the race cannot recur.
# Any other failure fails the script. Drop the retry when go.mod moves to
# 1.27.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FUZZTIME="${FUZZTIME:-10s}"
pkgs=("${@:-./...}")

# coordinator_race reports whether the output in $1 is that bare deadline
# failure and nothing else: the target failed with the one message, and no
# input was found failing.
coordinator_race() {
	grep -q '^--- FAIL: Fuzz' "$1" &&
		grep -A1 '^--- FAIL: Fuzz' "$1" | grep -qx '[[:space:]]*context deadline exceeded' &&
		! grep -q 'Failing input written to' "$1"
}

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Only packages whose test files declare a fuzz test: listing the tests of
# every package would link a test binary for each.
for dir in $(go list -f '{{.Dir}}' "${pkgs[@]}" | grep -v /test/e2e); do
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		budget="$FUZZTIME"
		for attempt in 1 2; do
			echo "== $dir $f ($budget)"
			if (cd "$dir" && go test . -run '^$' -fuzz "^${f}\$" -fuzztime "$budget" -fuzzminimizetime 1s) 2>&1 | tee "$out"; then
				break
			fi
			if [[ $attempt == 1 ]] && coordinator_race "$out"; then
				execs=$(grep -o 'execs: [0-9]*' "$out" | tail -1 | grep -o '[0-9]*$' || true)
				budget="${execs:-10000}x"
				echo "== $f: the fuzz coordinator failed on its own -fuzztime deadline with no failing input (go.dev/issue/75804); running it again for the same number of inputs (-fuzztime $budget), which has no deadline"
				continue
			fi
			exit 1
		done
	done
done
