package daemon

// announceInBackground has the network tell the segment where instance
// name is now (gratuitous ARP from its eth0, network.Manager.Announce),
// once its network lock is lifted after a restore: after a live move,
// switches and neighbours would otherwise keep sending its packets to the
// host it left until it sends a frame itself. It runs beside the rest of
// the restore and never fails it: a lost announcement is only a warning.
func (d *Daemon) announceInBackground(name string) {
	if !d.enterBackground() {
		return
	}
	go func() {
		defer d.bg.Done()
		if err := d.net.Announce(d.ctx, name); err != nil && d.ctx.Err() == nil {
			d.log.Warn("gratuitous ARP not sent", "name", name, "err", err)
		}
	}()
}
