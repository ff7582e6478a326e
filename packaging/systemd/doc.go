// Package systemd holds vessel's systemd units (vesseld.service in
// vessel-control.slice) and a test that checks them; it has no Go code.
package systemd
