// Command testhosts brings two vessel test hosts, alpha and beta, up and
// down on this machine (see testhost.Cluster for the topology). It is what
// scripts/testhosts runs; the tour, benchmarks and tests use the same code.
//
//	testhosts -bin ./bin up      # hosts alpha and beta, remotes alpha: and beta:
//	testhosts -bin ./bin status
//	testhosts -bin ./bin down
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vesselhost/vessel/internal/testhost"
)

const stateFile = "/run/vessel-testhosts/cluster.json"

func main() {
	bin := flag.String("bin", "bin", "directory holding vessel, vesseld and vessel-shim")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: testhosts [-bin DIR] up|down|status")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	dir, err := filepath.Abs(*bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r := testhost.NewRunner()
	switch flag.Arg(0) {
	case "up":
		if _, err := os.Stat(stateFile); err == nil {
			fmt.Println("test hosts are already up (testhosts down first)")
			return
		}
		c := testhost.NewCluster(r, dir, testhost.ClusterOptions{
			Fixed: true, Detached: true, RootDir: "/var/lib", CLIConfig: cliConfig(),
			StorageSizeMiB: 8192,
		})
		if err := c.Save(stateFile); err != nil {
			r.Fatalf("save %s: %v", stateFile, err)
		}
		for _, h := range c.Hosts {
			fmt.Printf("%s: vesseld pid %d in netns %s, root %s, remote %s:\n", h.Name(), h.PID(), h.Netns(), h.Root(), h.Name())
		}
		fmt.Printf("containers share %s behind gateway %s (this machine)\n", c.Spec().Subnet, c.Gateway())
	case "down":
		c, err := testhost.LoadCluster(r, dir, stateFile)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Println("test hosts are not up")
			return
		}
		if err != nil {
			r.Fatalf("%v", err)
		}
		c.Teardown()
		os.Remove(stateFile)
		if r.Failed() {
			os.Exit(1)
		}
		fmt.Println("test hosts are down")
	case "status":
		c, err := testhost.LoadCluster(r, dir, stateFile)
		if err != nil {
			fmt.Println("test hosts are not up")
			return
		}
		for _, h := range c.Hosts {
			fmt.Printf("%s: pid %d netns %s root %s\n", h.Name(), h.PID(), h.Netns(), h.Root())
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func cliConfig() string {
	if p := os.Getenv("VESSEL_CONFIG"); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = "/root/.config"
	}
	return filepath.Join(dir, "vessel", "config.yml")
}
