// Package systemd holds vessel's systemd units and a test that checks them;
// it has no Go code. vessel-control.slice holds vesseld.service (the
// control plane, CPUWeight=1000); vessel.slice holds
// vessel-instances.service, the delegated unit whose cgroup is the
// containers' parent (held by `vesseld hold`).
package systemd
