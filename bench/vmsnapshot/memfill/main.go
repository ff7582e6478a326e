// Command memfill is the /init of bench/vmsnapshot's guest: a static
// program that fills the guest's free memory with incompressible bytes,
// then answers on the console. It runs as PID 1 of an initramfs with no
// disk.
//
// The kernel command line sets vessel.fill=MiB (default: all but 128 MiB
// of MemAvailable) and vessel.seed=N. After the fill it prints
//
//	memfill: ready bytes=B sum=S ms=T
//
// and then, for each line "sum" read from the console, recomputes the
// checksum of the whole region and prints "memfill: sum=S". The data is
// splitmix64 output (incompressible, no zero page); the checksum weights
// each 64-bit word by its index, so a lost, zeroed or moved page changes it.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	_ = syscall.Mount("proc", "/proc", "proc", 0, "")
	_ = syscall.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	con, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
	if err != nil {
		con = os.Stdout
	}
	fill, seed := params(con)
	start := time.Now()
	mem, err := syscall.Mmap(-1, 0, fill, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		fmt.Fprintf(con, "memfill: mmap %d: %v\n", fill, err)
		idle()
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), fill/8)
	parallel(words, func(w []uint64, off int) { fillWords(w, seed, off) })
	sum := checksum(words)
	fmt.Fprintf(con, "memfill: ready bytes=%d sum=%016x ms=%d\n", fill, sum, time.Since(start).Milliseconds())
	sc := bufio.NewScanner(con)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "sum" {
			fmt.Fprintf(con, "memfill: sum=%016x\n", checksum(words))
		}
	}
	idle()
}

// params reads vessel.fill and vessel.seed from the kernel command line.
func params(con *os.File) (fill int, seed uint64) {
	seed = 1
	cmdline, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(cmdline)) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "vessel.fill":
			if n, err := strconv.Atoi(v); err == nil {
				fill = n << 20
			}
		case "vessel.seed":
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				seed = n
			}
		}
	}
	if fill == 0 {
		fill = int(memAvailable()) - 128<<20
	}
	fill &^= 2<<20 - 1
	if fill <= 0 {
		fmt.Fprintf(con, "memfill: no memory to fill\n")
		idle()
	}
	return fill, seed
}

// memAvailable returns MemAvailable from /proc/meminfo in bytes.
func memAvailable() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// parallel runs fn over one slice of words per CPU.
func parallel(words []uint64, fn func(w []uint64, off int)) {
	n := runtime.NumCPU()
	chunk := (len(words) + n - 1) / n
	var wg sync.WaitGroup
	for i := 0; i < len(words); i += chunk {
		end := min(i+chunk, len(words))
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(words[i:end], i)
		}()
	}
	wg.Wait()
}

// fillWords writes splitmix64(seed, off+i) into w[i].
func fillWords(w []uint64, seed uint64, off int) {
	x := seed*0x9e3779b97f4a7c15 + uint64(off)*0x9e3779b97f4a7c15
	for i := range w {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		w[i] = z ^ (z >> 31)
	}
}

// checksum sums the words, each multiplied by an odd function of its index.
func checksum(words []uint64) uint64 {
	sums := make([]uint64, runtime.NumCPU()+1)
	var mu sync.Mutex
	k := 0
	parallel(words, func(w []uint64, off int) {
		var s uint64
		for i, v := range w {
			s += v * (uint64(off+i)<<1 | 1)
		}
		mu.Lock()
		sums[k] = s
		k++
		mu.Unlock()
	})
	var t uint64
	for _, s := range sums {
		t += s
	}
	return t
}

// idle sleeps forever (PID 1 must not exit).
func idle() {
	for {
		time.Sleep(time.Hour)
	}
}
