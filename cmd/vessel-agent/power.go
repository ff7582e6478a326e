package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Linux input events (linux/input.h): struct input_event on 64-bit is a
// timeval (16 bytes), then type, code (uint16) and value (int32).
const (
	inputEventSize = 24
	evKey          = 1
	keyPower       = 116
)

// watchPowerButton sends sig to PID 1 each time an input device reports
// the power key pressed: the ACPI power button vessel presses to stop a
// VM, for images whose init does not listen to it (busybox's). It watches
// the event devices present now and those that appear within a few
// seconds (the button's driver may still be probing).
func watchPowerButton(sig unix.Signal) {
	seen := map[string]bool{}
	for i := 0; i < 10; i++ {
		paths, _ := filepath.Glob("/dev/input/event*")
		for _, p := range paths {
			if seen[p] {
				continue
			}
			f, err := os.Open(p)
			if err != nil {
				continue
			}
			seen[p] = true
			go readPowerKey(f, sig)
		}
		time.Sleep(time.Second)
	}
}

func readPowerKey(f *os.File, sig unix.Signal) {
	defer func() { _ = f.Close() }()
	buf := make([]byte, inputEventSize*16)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+inputEventSize <= n; off += inputEventSize {
			ev := buf[off : off+inputEventSize]
			typ := binary.LittleEndian.Uint16(ev[16:])
			code := binary.LittleEndian.Uint16(ev[18:])
			value := int32(binary.LittleEndian.Uint32(ev[20:]))
			if typ == evKey && code == keyPower && value == 1 {
				logf("power button: %s to init", unix.SignalName(sig))
				_ = unix.Kill(1, sig)
			}
		}
	}
}
