package runtime

import (
	"context"
	"os/exec"
	"time"
)

// criuProbeTimeout bounds the probe of one of Criu's options.
const criuProbeTimeout = 10 * time.Second

// criuHas reports whether Criu knows option (one that vessel's CRIU
// patches add; an unknown option fails CRIU's option parsing before
// --version), probed once per option. Without it, lacking logs why
// (a CRIU built before the patch: setup rebuilds it).
func (r *Runtime) criuHas(option, lacking string) bool {
	r.criuOptsMu.Lock()
	defer r.criuOptsMu.Unlock()
	if ok, probed := r.criuOpts[option]; probed {
		return ok
	}
	if r.cfg.Criu == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), criuProbeTimeout)
	defer cancel()
	args := []string{option}
	if option == "--images-ready-fd" {
		args = append(args, "0") // it takes a descriptor
	}
	ok := exec.CommandContext(ctx, r.cfg.Criu, append(args, "--version")...).Run() == nil
	if !ok {
		r.cfg.Log.Info(lacking, "criu", r.cfg.Criu)
	}
	if r.criuOpts == nil {
		r.criuOpts = map[string]bool{}
	}
	r.criuOpts[option] = ok
	return ok
}
