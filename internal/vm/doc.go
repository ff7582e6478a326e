// Package vm makes what a VM instance boots from: the guest kernel and the
// modules it needs (Kernel: Debian's cloud kernel package, unpacked by
// scripts/setup.sh), the initramfs vessel builds (BuildInitramfs: the
// guest agent as /init, the modules, /lib/modules/vessel.load), the VM's
// root disk (BuildDisk: a raw ext4 file made once per image with
// mkfs.ext4 -d from the image's rootfs) and the kernel command line
// (Cmdline, including vessel.net=).
//
// Vocabulary: a "kernel directory" holds vmlinuz, config and modules/
// (the package's /lib/modules/VERSION); a module is named as modprobe
// names it (virtio_blk; '-' and '_' are the same), and "builtin" modules
// are compiled into vmlinuz (modules/modules.builtin) and need no file.
package vm
