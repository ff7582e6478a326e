// Package image keeps vessel's image store: root-filesystem tarballs on disk,
// and the builders and importers that fill it.
//
// Vocabulary:
//
//   - Image: a root filesystem packed as one uncompressed tar archive, plus
//     the Metadata needed to boot it (init command, environment, stop
//     signal, ...). A stored image never changes.
//   - Rootfs tarball: a tar archive whose members are a root filesystem,
//     named relative to "/" with or without a "./" prefix ("etc/passwd",
//     "./etc/passwd"). Imports may be compressed (gzip, xz, zstd, bzip2); the
//     store always keeps them uncompressed.
//   - Fingerprint: the lowercase hex SHA-256 of the uncompressed rootfs tar
//     stream exactly as stored, 64 characters such as
//     "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae".
//     It is an image's identity (the same bytes give the same fingerprint)
//     and names its file in the store: DIR/<fingerprint>.tar.
//   - Store: a directory of <fingerprint>.tar files. A file is written under
//     a temporary ".tmp-" name, flushed to disk, and then linked into place,
//     so a fingerprint the store Has is always complete. Names starting with
//     ".tmp-" belong to imports in progress (or to crashed ones, and can be
//     removed while no import runs).
//   - Source: how an image was made: "builtin" (BuildBusybox), "tarball"
//     (Import of a rootfs tarball), "oci" (an OCI image layout, its layers
//     flattened into one rootfs), "debootstrap" (BuildDebian).
//   - System image and application image: a system image boots a real init
//     (/sbin/init: busybox, sysvinit or systemd) as the container's PID 1; an
//     application image runs an OCI entrypoint. Rootfs tarballs must be
//     system images; OCI images may be either.
//   - Stop signal: the signal the daemon sends PID 1 to ask for a clean
//     shutdown. Each init has its own: busybox init powers off on SIGUSR2,
//     sysvinit (with the inittab BuildDebian writes) on SIGPWR, systemd on
//     SIGRTMIN+3; applications get SIGTERM unless their config names
//     another. Inits end by calling reboot(2), which inside a PID namespace
//     makes the namespace's init exit instead of stopping the host (the
//     container needs CAP_SYS_BOOT for that).
//
// Aliases (human names for fingerprints), listings and every other piece of
// bookkeeping are not this package's business: the daemon keeps Metadata in
// its own database. This package only creates and deletes files and returns
// Metadata.
//
// External tools, each behind one small wrapper in its own file: GNU tar
// (Unpack, BuildDebian), xz (xz-compressed imports), debootstrap run under
// unshare (BuildDebian), and the busybox binary given to BuildBusybox.
package image
