# shellcheck shell=bash
# guest-bundle.sh — sourced by scripts/test-v2 and scripts/bench-v2: builds
# here what a guest of the host image cannot (it has no Go or C toolchain)
# and ships it to a guest.
#
#   bundle_build OUT    vessel's commands, the C workloads and test helpers
#                       into OUT/bin (the tests' VESSEL_TEST_BIN, see
#                       internal/testhost/prebuilt.go) and the source tree
#                       into OUT/src.tar (tests read testdata/ beside them)
#   bundle_ship OUT VM  copies OUT's bin/, tests/, bench/ and src.tar to
#                       /opt/vessel-t in the guest VM and unpacks the source
#                       into /opt/vessel-t/src (not under /root, which is
#                       0700: tests run helpers there as nobody)
#   lab_ensure VM       boots the lab unless VM is up; stops it at exit
#                       again unless VMLAB_KEEP=1

bundle_build() {
	local out=$1 c
	rm -rf "$out"
	mkdir -p "$out/bin"
	go build -o "$out/bin/" ./cmd/...
	go build -o "$out/bin/dial" ./test/security/testdata/dial
	for c in internal/testhost/testdata/*.c; do
		gcc -static -O2 -o "$out/bin/$(basename "$c" .c)" "$c"
	done
	git archive --format=tar HEAD >"$out/src.tar"
}

bundle_ship() {
	local out=$1 vm=$2 parts=() d
	for d in bin tests bench src.tar; do
		[ -e "$out/$d" ] && parts+=("$d")
	done
	tar -C "$out" -cf "$out.tar" "${parts[@]}"
	scripts/vmlab cp "$out.tar" "$vm:/root/bundle.tar"
	rm -f "$out.tar"
	scripts/vmlab exec "$vm" 'set -e; rm -rf /root/t /opt/vessel-t; mkdir -p /opt/vessel-t/src; cd /opt/vessel-t;
		tar -xf /root/bundle.tar; rm /root/bundle.tar; tar -C src -xf src.tar; chmod 755 /opt/vessel-t /opt/vessel-t/bin'
}

lab_ensure() {
	local vm=$1
	if scripts/vmlab status 2>/dev/null | grep -q "^$vm .*up"; then
		return
	fi
	scripts/vmlab up "${vm#vm}"
	if [ "${VMLAB_KEEP:-0}" != 1 ]; then
		trap 'scripts/vmlab down' EXIT
	fi
}
