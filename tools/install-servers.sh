#!/usr/bin/env bash
# Installs the newer servers the test matrix runs on, beside the system's
# redis-server 7.0 and without touching the system:
#
#   ${REDLOCK_SERVERS_DIR:-$HOME/.cache/redlock/servers}/redis-8.6/   Redis 8.6 (Debian experimental)
#   ${REDLOCK_SERVERS_DIR:-$HOME/.cache/redlock/servers}/valkey-9.1/  Valkey 9.1 (Debian sid)
#
# Each holds root/ (the packages unpacked with dpkg -x) and bin/redis-server
# and bin/redis-cli, small scripts that start the real binaries. The binaries
# need glibc >= 2.38 and Debian 12 has 2.36, so root/ also holds sid's libc6,
# libstdc++6 and libgcc-s1, and the scripts start the binaries through that
# libc's own loader; the libraries root/ lacks (jemalloc, lzf, ssl, ...) come
# from the system's directories. A server started through the scripts takes
# REDLOCK_SERVER_PRELOAD (a colon list) as the loader's --preload: LD_PRELOAD
# cannot be used, since it would also reach the system's /bin/sh running the
# script, which cannot load sid's libc.
#
# Clock faults run a server under libfaketime, which these servers take only
# with glibc's malloc in place of jemalloc: the preload is libfaketime, then
# root/usr/lib/x86_64-linux-gnu/libc.so.6, then lib/jemalloc-to-glibc.so,
# built here with gcc from tools/jemalloc-to-glibc.c (which says why). When
# gcc and libfaketime are present, the installer checks that too.
#
# Packages come from the Debian mirror this machine's apt already uses (the
# URI is read from /etc/apt/sources.list.d/ or /etc/apt/sources.list, or taken
# from REDLOCK_DEBIAN_MIRROR), through apt-get with a private sources list,
# lists and cache in a temporary directory: the system's apt state is never
# changed, and neither root nor sudo is needed.
#
# Idempotent: a server already installed is started once and its INFO server
# version checked; only a missing or failing one is (re)installed. Every
# install is verified the same way before it is put in place.
set -euo pipefail

dest=${REDLOCK_SERVERS_DIR:-$HOME/.cache/redlock/servers}
arch=x86_64-linux-gnu
tools=$(cd "$(dirname "$0")" && pwd -P)
libfaketime=/usr/lib/$arch/faketime/libfaketime.so.1
keyring_default=/usr/share/keyrings/debian-archive-keyring.gpg

# name, package suite, server package, tools package, server binary, cli binary,
# INFO field that carries the version, version prefix.
servers=(
	"redis-8.6 experimental redis-server redis-tools redis-server redis-cli redis_version 8.6."
	"valkey-9.1 sid valkey-server valkey-tools valkey-server valkey-cli valkey_version 9.1."
)

say() { echo "install-servers: $*" >&2; }
die() {
	say "$*"
	exit 1
}

[ "$(uname -m)" = x86_64 ] || die "only x86_64 Linux is supported (this is $(uname -sm))"
for tool in apt-get apt-cache dpkg-deb; do
	command -v "$tool" >/dev/null 2>&1 || die "needs $tool (a Debian or Ubuntu machine)"
done

work="" stage=""
cleanup() {
	if [ -n "${verify_pid:-}" ]; then kill -9 "$verify_pid" 2>/dev/null || true; fi
	if [ -n "$work" ]; then rm -rf "$work"; fi
	if [ -n "$stage" ]; then rm -rf "$stage"; fi
}
trap cleanup EXIT

# verify name field prefix: starts the installed server on a unix socket in a
# temporary directory, reads INFO server and checks the version. Prints the
# version on success.
verify() {
	local dir=$1 field=$2 prefix=$3 faketime=${4:-} tmp version="" i now t
	[ -x "$dir/bin/redis-server" ] && [ -x "$dir/bin/redis-cli" ] || return 1
	tmp=$(mktemp -d -t redlock-verify.XXXXXX)
	local env=()
	if [ -n "$faketime" ]; then
		# As redistest runs it: the clock from a timestamp file, a day ahead.
		echo "+86400.000000000" >"$tmp/clock"
		env=(FAKETIME_TIMESTAMP_FILE="$tmp/clock" FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1
			REDLOCK_SERVER_PRELOAD="$libfaketime:$dir/root/usr/lib/$arch/libc.so.6:$dir/lib/jemalloc-to-glibc.so")
	fi
	env "${env[@]}" "$dir/bin/redis-server" --port 0 --unixsocket "$tmp/sock" --dir "$tmp" --save "" \
		--appendonly no --daemonize no --logfile "$tmp/log" >"$tmp/out" 2>&1 &
	verify_pid=$!
	for i in $(seq 100); do
		if "$dir/bin/redis-cli" -s "$tmp/sock" ping 2>/dev/null | grep -q PONG; then
			# "|| true": a failed read must not end this subshell with the
			# server still running (set -e), only fail the check below.
			version=$("$dir/bin/redis-cli" -s "$tmp/sock" info server | tr -d '\r' | sed -n "s/^$field://p") || true
			if [ -n "$faketime" ]; then
				t=$("$dir/bin/redis-cli" -s "$tmp/sock" time | head -n 1) || t=0
				[[ $t =~ ^[0-9]+$ ]] || t=0
				now=$(date +%s)
				if [ $((t - now)) -lt 86000 ] || [ $((t - now)) -gt 86800 ]; then
					say "$dir: under libfaketime a day ahead the server's TIME is $t, the real clock $now"
					version=""
				fi
			fi
			break
		fi
		kill -0 "$verify_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$verify_pid" 2>/dev/null || true
	wait "$verify_pid" 2>/dev/null || true
	verify_pid=""
	if [[ "$version" != "$prefix"* ]]; then
		say "$dir: server${faketime:+ under libfaketime} did not report $field $prefix* (got '${version}'); its output:"
		cat "$tmp/out" "$tmp/log" >&2 2>/dev/null || true
		rm -rf "$tmp"
		return 1
	fi
	rm -rf "$tmp"
	echo "$version"
}

# mirror prints "URI keyring" of the first Debian archive (not security) source.
mirror() {
	if [ -n "${REDLOCK_DEBIAN_MIRROR:-}" ]; then
		echo "$REDLOCK_DEBIAN_MIRROR $keyring_default"
		return
	fi
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -e "$f" ] || continue
		# deb822 stanzas are separated by blank lines.
		awk -v def="$keyring_default" '
			function flush() { if (uri != "" && suites !~ /security/ && types ~ /(^| )deb( |$)/) { print uri, (key == "" ? def : key); found = 1; exit } uri = ""; suites = ""; key = ""; types = "" }
			/^[ \t]*$/ { flush(); next }
			/^URIs:/ { uri = $2 }
			/^Suites:/ { $1 = ""; suites = $0 }
			/^Types:/ { $1 = ""; types = $0 }
			/^Signed-By:/ && NF == 2 { key = $2 }
			END { if (!found) flush() }' "$f" | head -n 1 | grep . && return
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -e "$f" ] || continue
		awk -v def="$keyring_default" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) !~ /security/) { print $i, def; exit } }' "$f" |
			head -n 1 | grep . && return
	done
	return 1
}

missing=()
for spec in "${servers[@]}"; do
	read -r name _ _ _ _ _ field prefix <<<"$spec"
	if version=$(verify "$dest/$name" "$field" "$prefix" 2>/dev/null); then
		say "$name: $version in $dest/$name (verified)"
	else
		missing+=("$spec")
	fi
done

# pick pkg suite prefix: the version of pkg in suite whose upstream part
# starts with prefix (the epoch stripped), e.g. 5:8.6.3-1 for 8.6.
pick() {
	apt-cache "${apt[@]}" madison "$1" |
		awk -F' *\\| *' -v suite=" $2/" -v want="$3" '
			index($3, suite) { v = $2; u = v; sub(/^[0-9]+:/, "", u); if (index(u, want) == 1) { print v; exit } }'
}

# wrapper dir name real version suite: writes dir/bin/name, which starts
# root/usr/bin/real through the private loader. The script finds its
# directory at run time, so the install can be moved. --argv0 makes the
# server's idea of its own executable the script, not the bare binary that
# cannot start without the loader.
wrapper() {
	local dir=$1 name=$2 real=$3 v=$4 suite=$5
	cat >"$dir/bin/$name" <<EOF
#!/bin/sh
# $real $v from Debian $suite, started through sid's glibc loader
# (written by tools/install-servers.sh; it needs glibc >= 2.38, the system may
# have less). REDLOCK_SERVER_PRELOAD, a colon list, is preloaded into it.
here=\$(cd "\$(dirname "\$0")/.." && pwd -P)
lib="\$here/root/usr/lib/$arch"
exec "\$lib/ld-linux-x86-64.so.2" --library-path "\$lib:/lib/$arch:/usr/lib/$arch" \${REDLOCK_SERVER_PRELOAD:+--preload "\$REDLOCK_SERVER_PRELOAD"} --argv0 "\$here/bin/$name" "\$here/root/usr/bin/$real" "\$@"
EOF
	chmod 755 "$dir/bin/$name"
}

# install_missing downloads, unpacks, wraps and verifies the servers in missing.
install_missing() {
	local uri keyring spec name suite server_pkg tools_pkg server_bin cli_bin field prefix v debs lib notfound version
	read -r uri keyring < <(mirror) || die "no Debian mirror found in /etc/apt/sources.list{,.d}; set REDLOCK_DEBIAN_MIRROR to one"
	[ -r "$keyring" ] || die "the archive keyring $keyring is not readable (apt-get install debian-archive-keyring)"
	work=$(mktemp -d -t redlock-servers.XXXXXX)
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
	{
		echo "deb [signed-by=$keyring] $uri sid main"
		echo "deb [signed-by=$keyring] $uri experimental main"
	} >"$work/sources.list"
	apt=(-o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=/dev/null
		-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Debug::NoLocking=1
		-o APT::Sandbox::User="$(id -un)")
	say "reading the sid and experimental package lists from $uri"
	if ! apt-get "${apt[@]}" -qq update >"$work/update.log" 2>&1; then
		cat "$work/update.log" >&2
		die "apt-get update of the private lists failed"
	fi

	for spec in "${missing[@]}"; do
		read -r name suite server_pkg tools_pkg server_bin cli_bin field prefix <<<"$spec"
		v=$(pick "$server_pkg" "$suite" "$prefix")
		[ -n "$v" ] || die "$name: no $server_pkg $prefix* in $suite at $uri (apt-cache madison $server_pkg shows what there is)"
		say "$name: downloading $server_pkg $v from $suite with sid's libc6, libstdc++6 and libgcc-s1"
		debs="$work/debs/$name"
		mkdir -p "$debs"
		if ! (cd "$debs" && apt-get "${apt[@]}" -qq download "$server_pkg=$v" "$tools_pkg=$v" libc6/sid libstdc++6/sid libgcc-s1/sid) >"$work/download.log" 2>&1; then
			cat "$work/download.log" >&2
			die "$name: apt-get download failed"
		fi

		# Build beside the destination and rename into place, so that a
		# half-made install is never seen under the final name.
		mkdir -p "$dest"
		stage=$(mktemp -d "$dest/.$name.XXXXXX")
		chmod 755 "$stage"
		for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$stage/root"; done
		lib="$stage/root/usr/lib/$arch"
		[ -x "$lib/ld-linux-x86-64.so.2" ] || die "$name: sid's libc6 has no $lib/ld-linux-x86-64.so.2"
		[ -e "$stage/root/usr/bin/$server_bin" ] || die "$name: $server_pkg has no /usr/bin/$server_bin"
		notfound=$("$lib/ld-linux-x86-64.so.2" --library-path "$lib:/lib/$arch:/usr/lib/$arch" --list "$stage/root/usr/bin/$server_bin" |
			awk '/not found/ { print $1 }' | tr '\n' ' ')
		[ -z "$notfound" ] || die "$name: libraries missing on this machine: $notfound(install Debian's packages for them, e.g. apt-get install libjemalloc2 liblzf1 libatomic1)"
		mkdir -p "$stage/bin"
		wrapper "$stage" redis-server "$server_bin" "$v" "$suite"
		wrapper "$stage" redis-cli "$cli_bin" "$v" "$suite"
		version=$(verify "$stage" "$field" "$prefix") || die "$name: the fresh install does not start (its output is above)"
		rm -rf "${dest:?}/$name"
		mv "$stage" "$dest/$name"
		stage=""
		# The move changes the path the scripts resolve at run time: verify there.
		version=$(verify "$dest/$name" "$field" "$prefix") || die "$name: does not start from $dest/$name"
		say "$name: $version installed in $dest/$name"
	done
}

[ ${#missing[@]} -eq 0 ] || install_missing

# The libfaketime helper is rebuilt when its source is newer, so a fix to it
# reaches installs made before.
for spec in "${servers[@]}"; do
	read -r name _ _ _ _ _ field prefix <<<"$spec"
	dir=$dest/$name
	shim=$dir/lib/jemalloc-to-glibc.so
	if [ ! -e "$shim" ] || [ "$tools/jemalloc-to-glibc.c" -nt "$shim" ]; then
		if ! command -v gcc >/dev/null 2>&1; then
			say "$name: WARNING: no gcc, so no $shim: clock-fault tests (redistest FakeTime) cannot run on it (tools/install-deps.sh installs gcc)"
			continue
		fi
		mkdir -p "$dir/lib"
		gcc -shared -fPIC -O2 -Wall -Wextra -o "$shim.tmp" "$tools/jemalloc-to-glibc.c" || die "$name: building $shim failed"
		mv "$shim.tmp" "$shim"
	fi
	if [ ! -e "$libfaketime" ]; then
		say "$name: WARNING: no $libfaketime, so running under libfaketime is not checked (tools/install-deps.sh installs faketime)"
		continue
	fi
	version=$(verify "$dir" "$field" "$prefix" faketime) || die "$name: does not run under libfaketime (its output is above)"
	say "$name: $version runs under libfaketime"
done
