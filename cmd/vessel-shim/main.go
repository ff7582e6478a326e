// Command vessel-shim monitors one container: it runs it with runc, keeps its
// console log and records its exit, outliving daemon restarts. vesseld starts
// it as "vessel-shim <state-dir>/shim.json"; see package internal/shim.
package main

import (
	"fmt"
	"os"

	"github.com/vesselhost/vessel/internal/shim"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: vessel-shim STATE-DIR/shim.json")
		os.Exit(2)
	}
	os.Exit(shim.Run(os.Args[1]))
}
