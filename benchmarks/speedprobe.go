package benchmarks

import (
	"fmt"
	"syscall"
	"time"
)

// speedProbe times three fixed pieces of work that this VM's speed
// shows in (it changed by 2x within a day): integer steps, system calls
// and first touches of fresh pages. A report carries it beside its
// numbers, so that two reports' ratios to native can be set side by
// side only when their probes agree.
func speedProbe() string {
	cpu := timeIt(func() {
		x := uint64(88172645463325252)
		for range 100_000_000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		probeSink = x
	})
	sys := timeIt(func() {
		for range 10_000 {
			syscall.Getppid()
		}
	})
	touch := timeIt(func() {
		const pages = 4096
		b, err := syscall.Mmap(-1, 0, pages*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return
		}
		for p := 0; p < pages; p++ {
			b[p*4096] = 1
		}
		syscall.Munmap(b)
	})
	return fmt.Sprintf("speed probe: 10^8 xorshift steps %.0f ms, 10,000 getppid %.1f ms, 4,096 first page touches %.1f ms",
		ms(cpu), ms(sys), ms(touch))
}

// probeSink keeps the xorshift loop from being optimised away.
var probeSink uint64

func timeIt(f func()) time.Duration {
	t0 := time.Now()
	f()
	return time.Since(t0)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
