#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine:
# redis-server (the real nodes), faketime (clock faults in the chaos suite),
# strace (fsynced_powerloss_test.go and break2_fsynced_test.go watch a server's
# writes and fsyncs to play a power loss before its next fsync; without it those
# tests fail) and spin with
# gcc (the model checker behind `make model`).
# Safe to run repeatedly: it does nothing when all are present.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(faketime)
command -v strace >/dev/null 2>&1 || need+=(strace)
command -v spin >/dev/null 2>&1 || need+=(spin)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root (or sudo) to install: ${need[*]}" >&2; exit 1; }
	sudo=sudo
fi
echo "install-deps: installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
# Debian starts a system redis on :6379 after install; the project never uses it.
if command -v systemctl >/dev/null 2>&1; then $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
