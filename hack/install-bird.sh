#!/usr/bin/env bash
# install-bird.sh installs the two BIRD daemons that rebound's tests run:
#
#   BIRD 1.6 (Debian package "bird", the base of Calico's fork):
#       /usr/sbin/bird, /usr/sbin/birdc
#   BIRD 2   (Debian package "bird2", unpacked beside it, not installed):
#       /opt/rebound/bird2/usr/sbin/bird, /opt/rebound/bird2/usr/sbin/birdc
#
# Debian's bird2 conflicts with bird (both own /usr/sbin/bird), so bird2 is
# fetched with `apt-get download` and unpacked with `dpkg -x`; its run-time
# libraries are installed as ordinary packages. Tests find BIRD 2 through
# $REBOUND_BIRD2, which defaults to the path above.
#
# The tests start their own BIRD instances on loopback; the system's
# bird.service must not run (it would listen on port 179 of every address).
# The package is therefore installed with service starts denied, and the
# units are disabled where systemd runs. No process this script did not
# start is ever signalled.
#
# Run as root on Debian 12. Idempotent: a second run changes nothing.
set -euo pipefail

readonly BIRD2_ROOT=/opt/rebound/bird2
readonly BIRD2_STAMP="${BIRD2_ROOT}/.rebound-bird2-version"

log() { printf 'install-bird: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$(id -u)" -eq 0 ]] || die "run as root (it calls apt-get and writes ${BIRD2_ROOT})"
command -v apt-get >/dev/null || die "apt-get not found: this script supports Debian 12 only"

export DEBIAN_FRONTEND=noninteractive

# candidate prints the version apt would install for package $1, or nothing.
candidate() {
	apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ { if ($2 != "(none)") print $2 }' || true
}

# installed prints the installed version of package $1, or nothing.
installed() {
	dpkg-query -W -f='${db:Status-Status} ${Version}\n' "$1" 2>/dev/null |
		awk '$1 == "installed" { print $2 }' || true
}

# Refresh the package lists only when apt does not know the packages yet, so
# a second run does not touch the network.
if [[ -z "$(candidate bird)" || -z "$(candidate bird2)" ]]; then
	log "apt-get update (bird or bird2 unknown to apt)"
	apt-get update -qq
fi
[[ -n "$(candidate bird)" ]] || die "apt has no candidate for package bird; check /etc/apt/sources.list"
[[ -n "$(candidate bird2)" ]] || die "apt has no candidate for package bird2; check /etc/apt/sources.list"

# --- BIRD 1.6 -------------------------------------------------------------

# Deny service starts while the package is configured: Debian's maintainer
# scripts (invoke-rc.d, deb-systemd-invoke) ask /usr/sbin/policy-rc.d, and
# exit code 101 means "action forbidden". A policy already there is set
# aside for the install and put back afterwards, whatever it said.
policy_rc=/usr/sbin/policy-rc.d
policy_backup=""
own_policy=""
restore_policy() {
	if [[ -n "${own_policy}" ]]; then
		rm -f "${policy_rc}"
		own_policy=""
	fi
	if [[ -n "${policy_backup}" ]]; then
		mv -f "${policy_backup}" "${policy_rc}"
		policy_backup=""
	fi
}
trap restore_policy EXIT

bird_was_installed="$(installed bird)"
if [[ -z "${bird_was_installed}" ]]; then
	if [[ -e "${policy_rc}" ]]; then
		policy_backup="${policy_rc}.rebound-backup"
		mv -f "${policy_rc}" "${policy_backup}"
	fi
	own_policy=yes
	printf '#!/bin/sh\n# rebound install-bird: deny service starts during install\nexit 101\n' >"${policy_rc}"
	chmod 0755 "${policy_rc}"
	log "apt-get install bird $(candidate bird)"
	apt-get install -y -qq --no-install-recommends bird >/dev/null
	restore_policy
else
	log "bird ${bird_was_installed} already installed"
fi

# Where systemd is the running init, keep the units from starting at boot.
# Disabling signals nothing. A unit is stopped only if this run installed the
# package (policy-rc.d denied its start, so this is a safety net); a bird
# service running from before is reported and left alone.
if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
	for unit in bird.service bird6.service; do
		if systemctl list-unit-files "${unit}" >/dev/null 2>&1; then
			systemctl disable --quiet "${unit}" 2>/dev/null || true
			if [[ -z "${bird_was_installed}" ]]; then
				systemctl stop "${unit}" 2>/dev/null || true
			elif systemctl is-active --quiet "${unit}"; then
				log "warning: ${unit} is active and was not started by this script; left running"
			fi
		fi
	done
else
	log "systemd is not the running init; bird.service cannot have been started"
fi

[[ -x /usr/sbin/bird && -x /usr/sbin/birdc ]] || die "/usr/sbin/bird or /usr/sbin/birdc missing after install"

# --- BIRD 2 ----------------------------------------------------------------

bird2_version="$(candidate bird2)"

# Run-time dependencies of bird2, minus the conflicting bird itself. They are
# plain libraries (libssh-gcrypt-4, libreadline8, ...), safe to install.
mapfile -t bird2_deps < <(apt-cache depends bird2 |
	awk '$1 == "Depends:" || $1 == "PreDepends:" { print $2 }' |
	grep -v -e '^<' -e '^bird$' | sort -u)
missing=()
for dep in "${bird2_deps[@]}"; do
	[[ -n "$(installed "${dep}")" ]] || missing+=("${dep}")
done
if ((${#missing[@]} > 0)); then
	log "apt-get install ${missing[*]} (bird2 run-time dependencies)"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ -f "${BIRD2_STAMP}" && "$(cat "${BIRD2_STAMP}")" == "${bird2_version}" &&
	-x "${BIRD2_ROOT}/usr/sbin/bird" ]]; then
	log "bird2 ${bird2_version} already unpacked in ${BIRD2_ROOT}"
else
	log "unpacking bird2 ${bird2_version} into ${BIRD2_ROOT}"
	work="$(mktemp -d)"
	# apt fetches as the unprivileged _apt user where it exists.
	if id _apt >/dev/null 2>&1; then chown _apt "${work}"; fi
	# Unpack beside the target, then swap, so an interrupted run never leaves
	# a half-filled ${BIRD2_ROOT}.
	mkdir -p "$(dirname "${BIRD2_ROOT}")"
	staging="$(mktemp -d "${BIRD2_ROOT}.new.XXXXXX")"
	(cd "${work}" && apt-get download -qq "bird2=${bird2_version}")
	deb="$(find "${work}" -maxdepth 1 -name 'bird2_*.deb' | head -n 1)"
	[[ -n "${deb}" ]] || die "apt-get download bird2 produced no .deb"
	dpkg -x "${deb}" "${staging}"
	printf '%s\n' "${bird2_version}" >"${staging}/$(basename "${BIRD2_STAMP}")"
	chmod 0755 "${staging}"
	rm -rf "${BIRD2_ROOT}"
	mv "${staging}" "${BIRD2_ROOT}"
	rm -rf "${work}"
fi

[[ -x "${BIRD2_ROOT}/usr/sbin/bird" && -x "${BIRD2_ROOT}/usr/sbin/birdc" ]] ||
	die "${BIRD2_ROOT}/usr/sbin/bird or birdc missing after unpack"

# Both daemons print their version on stderr; a missing library shows here.
log "$(/usr/sbin/bird --version 2>&1)  (/usr/sbin/bird)"
log "$("${BIRD2_ROOT}/usr/sbin/bird" --version 2>&1)  (${BIRD2_ROOT}/usr/sbin/bird)"
