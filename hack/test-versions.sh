#!/usr/bin/env bash
# make test-versions: the e2e scenarios whose behaviour depends on the
# control plane, run on each older supported Kubernetes release (the newest
# runs them in `make test`), and a table of their figures per release.
#
#   VERSIONS="1.35 1.36" bash hack/test-versions.sh    # the default
#   VERSIONS="1.35 1.36 1.37" bash hack/test-versions.sh
#
# Each release's sandbox is built on first use (10 to 12 minutes cold on 2
# cores, then cached). Logs and the table go to $OUT (default
# _output/test-versions); the table is also printed. Exits non-zero when
# any release fails a test, after running them all.
set -uo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSIONS=${VERSIONS:-1.35 1.36}
OUT=${OUT:-_output/test-versions}
PARALLEL=${E2E_PARALLEL:-4}
# S1, S3, S7, S13 and the stall's edges (S15): the scenarios that hinge on
# kube-controller-manager's node lifecycle and eviction; the admission
# policies and credentials (S8, the controller's policy, the CRD's field
# errors); the install paths (chart, manifests); and the sandbox's own
# check that it runs the release it was built as.
TESTS='^(TestSandboxNodeStopAndStart|TestS1WithoutAndWithRebound|TestS3WithoutAndWithRebound|TestS7ControlPlanePartition|TestS7NoTarget|TestS7ControlPlanePartitionPeering|TestS13FastDetection|TestS13Series|TestS15StallEdges|TestS15RealDeathAfterStall|TestControllerAdmissionPolicy|TestS8AgentCredentialConfined|TestS8RejoinCredentialConfined|TestS8GossipCredentialConfined|TestRecoveryPolicyRejectedWithFieldName|TestHelmChartInstall|TestDeployManifestsServerSideApply)$'
TESTS=${TESTS_OVERRIDE:-$TESTS}

mkdir -p "$OUT"
status=0
# TABLE_ONLY=1 rebuilds the table from the logs already in $OUT.
[ -n "${TABLE_ONLY:-}" ] && VERSIONS_RUN= || VERSIONS_RUN=$VERSIONS
if [ -n "$VERSIONS_RUN" ] && [ -n "${REBOUND_SANDBOX_BIN:-}" ]; then
  echo "test-versions: REBOUND_SANDBOX_BIN=$REBOUND_SANDBOX_BIN holds one release; unset it to test each release" >&2
  exit 2
fi
for v in $VERSIONS_RUN; do
  log="$OUT/$v.log"
  rm -f "$log"
  echo "== Kubernetes $v: sandbox build"
  if ! $GO run ./cmd/rebound sandbox build --kubernetes "$v"; then
    echo "== Kubernetes $v: build failed"
    echo "test-versions: the sandbox build of Kubernetes $v failed" > "$log"
    status=1
    continue
  fi
  echo "== Kubernetes $v: e2e ($log)"
  start=$(date +%s)
  REBOUND_KUBERNETES=$v $GO test -count=1 -v -json -timeout 40m -parallel "$PARALLEL" -run "$TESTS" ./test/e2e \
    | $GO run ./hack/testsummary > "$log" 2>&1
  rc=$?
  echo "== Kubernetes $v: exit $rc in $(( $(date +%s) - start )) s"
  [ "$rc" -eq 0 ] || status=1
done

# The table: one row per test (its result and time) and per METRIC (but
# the sandboxes' start times, printed once per sandbox), one column per
# release, from the logs just written.
table="$OUT/table.md"
logs=()
for v in $VERSIONS; do
  if [ -f "$OUT/$v.log" ]; then logs+=("$OUT/$v.log"); else echo "test-versions: no log for Kubernetes $v in $OUT" >&2; status=1; fi
done
[ "${#logs[@]}" -gt 0 ] || { echo "test-versions: no logs to tabulate" >&2; exit 1; }
awk -v versions="$VERSIONS" '
  BEGIN { n = split(versions, vs, " ") }
  FNR == 1 { file = FILENAME; sub(/.*\//, "", file); sub(/\.log$/, "", file) }
  /^e2e: sandbox Kubernetes / { release[file] = $4 }
  /^test-versions: the sandbox build of Kubernetes .* failed/ { release[file] = file " (build failed)" }
  /^--- (PASS|FAIL|SKIP): Test[^\/ ]* / { name = $3; if (!(name in seen)) { seen[name] = 1; order[++rows] = name }
      r = $2; sub(/:$/, "", r); t = $4; gsub(/[()s]/, "", t); cell[name, file] = sprintf("%s (%.0f s)", r, t) }
  /^METRIC sandbox_start_/ { next }
  /^METRIC / { split($2, kv, "="); name = kv[1]; if (!(name in seen)) { seen[name] = 1; order[++rows] = name }
      cell[name, file] = kv[2] " " $3 }
  END {
    printf "| | "; for (i = 1; i <= n; i++) printf "%s | ", (vs[i] in release ? release[vs[i]] : vs[i]); print ""
    printf "|---|"; for (i = 1; i <= n; i++) printf "---|"; print ""
    # Tests first, then the figures, each in name order.
    for (r = 1; r <= rows; r++) {
      line = sprintf("| %s | ", order[r]); for (i = 1; i <= n; i++) line = line sprintf("%s | ", ((order[r], vs[i]) in cell ? cell[order[r], vs[i]] : "–"))
      print (order[r] ~ /^Test/ ? "0" : "1") line | "sort | cut -c2-"
    }
  }' "${logs[@]}" > "$table" || { echo "test-versions: the table failed" >&2; status=1; }
cat "$table"
exit $status
