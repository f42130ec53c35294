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
# FTP peers (bench/ftp.py). Debian's FTP servers conflict with each other (each provides
# ftp-server), so pure-ftpd is installed and vsftpd's package is only unpacked, under
# /opt/peers/vsftpd (its libraries are pure-ftpd's and the base system's).
if ! command -v pure-ftpd >/dev/null && [ ! -x /usr/sbin/pure-ftpd ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq pure-ftpd
  service pure-ftpd stop >/dev/null 2>&1 || true
fi
if [ ! -x /opt/peers/vsftpd/usr/sbin/vsftpd ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq vsftpd)
  apt-get install -y -qq libwrap0 >/dev/null
  mkdir -p /opt/peers/vsftpd
  dpkg-deb -x "$tmp"/vsftpd_*.deb /opt/peers/vsftpd
  basename "$tmp"/vsftpd_*.deb .deb > /opt/peers/vsftpd/VERSION
  rm -rf "$tmp"
fi
