#!/usr/bin/env bash
# Install PostgreSQL's server binaries (Debian's `postgresql` package) for tests/test_state_postgres.py.
#
# The tests start a throwaway server of their own (initdb into a temporary directory, pg_ctl on
# 127.0.0.1 and a free port; see tests/emulators/postgres.py), so this script only makes sure the
# binaries are there: /usr/lib/postgresql/<version>/bin/{initdb,pg_ctl,postgres}. The package's
# own "main" cluster is not wanted: createcluster.conf says so before the first install, so no
# system-wide server is created or started.
#
# Idempotent: with initdb and pg_ctl present it does nothing (apt-get runs only when they are
# missing). Needs root for apt-get and Debian's package archive (no other network). As root, the
# tests run PostgreSQL as the `postgres` user the package creates (PostgreSQL refuses root).
set -euo pipefail

have_binaries() {
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && return 0
  done
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1
}

if have_binaries && { [[ "$(id -u)" != 0 ]] || id postgres >/dev/null 2>&1; }; then
  exit 0
fi

if [[ "$(id -u)" != 0 ]]; then
  echo "postgres_setup: PostgreSQL binaries missing and not root: install the Debian package 'postgresql'" >&2
  exit 1
fi

start=$SECONDS
echo "postgres_setup: installing PostgreSQL (Debian package postgresql)"
conf=/etc/postgresql-common/createcluster.d
mkdir -p "$conf"
[[ -f "$conf/50-gpucost-no-main-cluster.conf" ]] || echo "create_main_cluster = false" >"$conf/50-gpucost-no-main-cluster.conf"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
have_binaries || { echo "postgres_setup: postgresql installed but initdb/pg_ctl not found" >&2; exit 1; }
id postgres >/dev/null 2>&1 || { echo "postgres_setup: no postgres user after install" >&2; exit 1; }
echo "postgres_setup: ready in $((SECONDS - start)) s"
