package report

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stint-project/stint/formats"
)

// BenchmarkLoad reads a trace of 1M events (20k distinct) per iteration.
func BenchmarkLoad(b *testing.B) {
	path := filepath.Join(b.TempDir(), "big.arrow")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w, err := formats.NewWriter(f, synthRun(1, true), synthModules)
	if err != nil {
		b.Fatal(err)
	}
	const n = 1 << 20
	evs := make([]formats.Event, 0, 4096)
	for i := range n {
		evs = append(evs, formats.Event{Kind: formats.KindJccTaken, TID: 1, Time: uint64(i), Src: uint64(i % 20000 * 16), Dst: 0x800})
		if len(evs) == cap(evs) {
			w.Write(evs...)
			evs = evs[:0]
		}
	}
	w.Write(evs...)
	w.Close()
	f.Close()
	b.SetBytes(n)
	b.ResetTimer()
	for range b.N {
		l := NewLoader()
		if _, err := l.Load(context.Background(), path); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mevents/s")
}
