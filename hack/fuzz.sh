#!/usr/bin/env bash
# fuzz.sh runs every Go native fuzz test of the module for a short time
# each (FUZZTIME, default 10s), on top of the checked-in seed corpora under
# <package>/testdata/fuzz that plain `go test` already replays. CI runs it
# (`make test`, FUZZTIME=5s); a failure leaves the crashing input in
# testdata/fuzz to commit with the fix.
#
#   hack/fuzz.sh                 # every package
#   hack/fuzz.sh ./pkg/peering/...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FUZZTIME="${FUZZTIME:-10s}"
pkgs=("${@:-./...}")
# Only packages whose test files declare a fuzz test: listing the tests of
# every package would link a test binary for each.
for dir in $(go list -f '{{.Dir}}' "${pkgs[@]}" | grep -v /test/e2e); do
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		echo "== $dir $f ($FUZZTIME)"
		(cd "$dir" && go test . -run '^$' -fuzz "^${f}\$" -fuzztime "$FUZZTIME")
	done
done
