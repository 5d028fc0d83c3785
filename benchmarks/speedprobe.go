package benchmarks

import (
	"fmt"
	"syscall"
	"time"
)

// speedProbe times four fixed pieces of work that this VM's speed
// shows in (it changed by 2x within a day): integer steps, a chase
// through memory, system calls and first touches of fresh pages. A
// report carries it beside its numbers, so that two reports' ratios to
// native can be set side by side only when their probes agree.
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
	chase := timeIt(func() {
		// a random cycle through 32 MiB: each step a cache miss, the
		// memory's latency (a neighbour's load shows here, not in cpu)
		const n = 8 << 20
		next := make([]uint32, n)
		for i := range next {
			next[i] = uint32(i)
		}
		x := uint64(2463534242)
		for i := n - 1; i > 0; i-- { // Sattolo's shuffle: one cycle
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			j := int(x % uint64(i))
			next[i], next[j] = next[j], next[i]
		}
		k := uint32(0)
		for range 2_000_000 {
			k = next[k]
		}
		probeSink += uint64(k)
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
	return fmt.Sprintf("speed probe: 10^8 xorshift steps %.0f ms, 32 MiB shuffled and 2*10^6 steps chased %.0f ms, 10,000 getppid %.1f ms, 4,096 first page touches %.1f ms",
		ms(cpu), ms(chase), ms(sys), ms(touch))
}

// probeSink keeps the xorshift loop from being optimised away.
var probeSink uint64

func timeIt(f func()) time.Duration {
	t0 := time.Now()
	f()
	return time.Since(t0)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
