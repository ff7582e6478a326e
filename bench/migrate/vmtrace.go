package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vesselhost/vessel/internal/testhost"
)

// vmTrace records, around each VM move (-vm-trace DIR), what a reader
// needs to place the client's gap: tcpdump -tt of ARP, RARP and the
// client's UDP echo on every link of both hosts' namespaces and of the
// segment (the machine's namespace), each host's bridge forwarding entry
// for the VM's MAC right after the move returned, and the daemons' logs
// (their debug lines carry the switch-over's steps).
type vmTrace struct {
	dir  string
	c    *testhost.Cluster
	caps []*exec.Cmd
	i    int
}

// vmTraceMoves is how many moves of a run are traced (two of each arm
// of an A/B).
const vmTraceMoves = 4

// start begins move i's captures (the first vmTraceMoves).
func (tr *vmTrace) start(i int) {
	if tr == nil {
		return
	}
	tr.i = i
	if i >= vmTraceMoves {
		return
	}
	filter := "arp or rarp or udp port " + echoPort
	spaces := map[string][]string{"seg": nil}
	for _, h := range []string{"alpha", "beta"} {
		spaces[h] = []string{"ip", "netns", "exec", tr.c.Host(h).Netns()}
	}
	for name, prefix := range spaces {
		f, err := os.Create(filepath.Join(tr.dir, fmt.Sprintf("move%02d-%s.txt", i, name)))
		if err != nil {
			continue
		}
		argv := append(append([]string{}, prefix...), "tcpdump", "-l", "-n", "-tt", "-e", "-i", "any", "--immediate-mode", filter)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if cmd.Start() == nil {
			tr.caps = append(tr.caps, cmd)
		}
		f.Close()
	}
	time.Sleep(500 * time.Millisecond) // tcpdump attaches
}

// stopCapture saves the bridges' forwarding entries (as the move's
// command returns).
func (tr *vmTrace) stopCapture() {
	if tr.i >= vmTraceMoves {
		return
	}
	var fdb []byte
	for _, h := range []string{"alpha", "beta"} {
		out, _ := exec.Command("ip", "netns", "exec", tr.c.Host(h).Netns(), "bridge", "fdb", "show", "br", "vesselbr0").CombinedOutput()
		fdb = append(fdb, fmt.Sprintf("%s at %.6f:\n%s\n", h, float64(time.Now().UnixMicro())/1e6, out)...)
	}
	out, _ := exec.Command("bridge", "fdb", "show", "br", tr.c.Spec().Segment).CombinedOutput()
	fdb = append(fdb, fmt.Sprintf("segment:\n%s\n", out)...)
	_ = os.WriteFile(filepath.Join(tr.dir, fmt.Sprintf("move%02d-fdb.txt", tr.i)), fdb, 0o644)
}

// stop ends the move's captures and saves the daemons' logs.
func (tr *vmTrace) stop() {
	if tr == nil {
		return
	}
	for _, cmd := range tr.caps {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		_ = cmd.Wait()
	}
	tr.caps = nil
	for _, h := range []string{"alpha", "beta"} {
		if b, err := os.ReadFile(filepath.Join(tr.c.Host(h).Root(), "vesseld.log")); err == nil {
			_ = os.WriteFile(filepath.Join(tr.dir, h+"-vesseld.log"), b, 0o644)
		}
	}
}
