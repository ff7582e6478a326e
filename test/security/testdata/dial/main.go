// Command dial tries to connect to each address given (unix:PATH or
// tcp:HOST:PORT) and prints one line per address: "ADDR connected" or
// "ADDR refused: ERROR". The security tests run it as an unprivileged
// host user.
package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	for _, a := range os.Args[1:] {
		network, addr, _ := strings.Cut(a, ":")
		c, err := net.DialTimeout(network, addr, 2*time.Second)
		if err != nil {
			fmt.Printf("%s refused: %v\n", a, err)
			continue
		}
		c.Close()
		fmt.Printf("%s connected\n", a)
	}
}
