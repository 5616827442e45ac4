#!/usr/bin/env bash
# gen.sh regenerates the code and manifests derived from api/v1alpha1:
#
#   api/v1alpha1/zz_generated.deepcopy.go          DeepCopy methods
#   deploy/crd/rebound.dev_recoverypolicies.yaml   the RecoveryPolicy CRD
#
# Run it from anywhere after changing api/v1alpha1; commit what it writes.
# controller-gen is run by version with `go run pkg@version`, which neither
# reads nor changes go.mod (the first run downloads it through the Go
# module proxy; later runs use the build cache).
#
# CI checks that the tree is up to date with:
#   hack/gen.sh && git diff --exit-code -- api deploy/crd
set -euo pipefail

CONTROLLER_GEN_VERSION="${CONTROLLER_GEN_VERSION:-v0.23.0}"

cd "$(dirname "${BASH_SOURCE[0]}")/.."

go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_GEN_VERSION}" \
	object paths=./api/... \
	crd paths=./api/... output:crd:dir=./deploy/crd

# The Helm chart carries copies (TestHelmChartFilesInSync checks them).
cp deploy/crd/rebound.dev_*.yaml charts/rebound/crds/
cp deploy/monitoring/alerts.yaml charts/rebound/files/alerts.yaml
