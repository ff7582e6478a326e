// Package agent is vessel's guest agent protocol: the server that
// vessel-agent runs inside a virtual machine and the client vesseld uses to
// reach it.
//
// Vocabulary:
//
//   - channel: the byte stream between host and guest — a virtio-serial
//     port named org.vesselhost.agent (a unix socket on the host, QEMU's
//     chardev) or an AF_VSOCK connection to port [VsockPort].
//   - session: one yamux session over a channel. The guest is the yamux
//     server; the host opens streams. When the host side of a virtio-serial
//     port closes (vesseld restarts), the guest ends the session and starts
//     a fresh one when the host reconnects.
//   - request: one yamux stream. The client writes a header frame (JSON,
//     carrying [ProtocolVersion] and an op), the server answers with a
//     header frame, then the op's data frames follow (see frame.go).
//
// Ops: ping (the agent's [Info]), exec (a command with stdio, a terminal,
// resizes and signals; its exit code or signal), push and pull (a file's
// bytes, mode and owner; a push is written atomically). Commands and files
// live under the server's Root: /proc/1/root in a guest, the root the
// guest's init switched to.
package agent
