package testhost

import (
	"os"

	"github.com/google/nftables"
)

// filterTable is the nftables table (bridge family) of a host's port
// filters, as internal/network names it.
func (h *Host) filterTable() string { return "vessel-" + h.bridge }

// nftConn opens nf_tables in the host's network namespace; close the file
// when done (nil if the host runs in the machine's namespace).
func (h *Host) nftConn() (*nftables.Conn, *os.File, error) {
	if h.opts.Netns == "" {
		c, err := nftables.New()
		return c, nil, err
	}
	f, err := os.Open("/run/netns/" + h.opts.Netns)
	if err != nil {
		return nil, nil, err
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, f, nil
}

// hasFilterTable reports whether the host's port filter table exists.
func (h *Host) hasFilterTable() bool {
	c, f, err := h.nftConn()
	if err != nil {
		return false
	}
	if f != nil {
		defer f.Close()
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyBridge)
	if err != nil {
		return false
	}
	for _, t := range tables {
		if t.Name == h.filterTable() {
			return true
		}
	}
	return false
}

// deleteFilterTable deletes the host's port filter table.
func (h *Host) deleteFilterTable() {
	c, f, err := h.nftConn()
	if err != nil {
		return
	}
	if f != nil {
		defer f.Close()
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyBridge, Name: h.filterTable()})
	_ = c.Flush()
}
