#!/usr/bin/env bash
# fuzz.sh runs every Go native fuzz test of the module for a short time
# each (FUZZTIME, default 10s), on top of the checked-in seed corpora under
# <package>/testdata/fuzz that plain `go test` already replays. CI runs it;
# a failure leaves the crashing input in testdata/fuzz to commit with the fix.
#
#   hack/fuzz.sh                 # every package
#   hack/fuzz.sh ./pkg/peering/...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FUZZTIME="${FUZZTIME:-10s}"
pkgs=("${@:-./...}")
for pkg in $(go list "${pkgs[@]}" | grep -v /test/e2e); do
	for f in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "== $pkg $f ($FUZZTIME)"
		go test "$pkg" -run '^$' -fuzz "^${f}\$" -fuzztime "$FUZZTIME"
	done
done
