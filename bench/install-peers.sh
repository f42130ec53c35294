#!/usr/bin/env bash
# Install the peer servers and load tools the comparison uses (Debian packages).
set -euo pipefail
need=()
command -v nginx >/dev/null || need+=(nginx-light)
command -v lighttpd >/dev/null || need+=(lighttpd)
command -v h2o >/dev/null || need+=(h2o)
command -v apache2 >/dev/null || need+=(apache2)
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
# The packaged services are not wanted running: the bench starts its own instances.
for s in nginx lighttpd h2o apache2; do
  service "$s" stop >/dev/null 2>&1 || true
done
