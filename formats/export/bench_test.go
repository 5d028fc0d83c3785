package export

import (
	"context"
	"io"
	"testing"

	"github.com/stint-project/stint/formats"
)

// genSource is a synthetic source of n events over a fixed set of
// distinct locations, generated batch by batch (nothing per event is
// kept), for benchmarks.
type genSource struct {
	tool     formats.Tool
	n, done  int
	distinct uint64
	b        Batch
	// onlyCalls: every event is a call (no returns).
	onlyCalls bool
}

func (s *genSource) Modules() []formats.Module { return testMods }
func (s *genSource) Tool() formats.Tool        { return s.tool }
func (s *genSource) Batch() *Batch             { return &s.b }
func (s *genSource) Err() error                { return nil }

func (s *genSource) Next() bool {
	const rows = 64 << 10
	if s.done >= s.n {
		return false
	}
	m := min(rows, s.n-s.done)
	if s.b.Kind == nil {
		s.b = Batch{Kind: make([]uint8, rows), TID: make([]uint32, rows), Time: make([]uint64, rows),
			SrcModule: make([]uint16, rows), Src: make([]uint64, rows), DstModule: make([]uint16, rows),
			Dst: make([]uint64, rows), Value: make([]uint64, rows)}
	}
	s.b.Kind, s.b.TID, s.b.Time = s.b.Kind[:m], s.b.TID[:m], s.b.Time[:m]
	s.b.SrcModule, s.b.Src, s.b.DstModule, s.b.Dst, s.b.Value = s.b.SrcModule[:m], s.b.Src[:m], s.b.DstModule[:m], s.b.Dst[:m], s.b.Value[:m]
	for i := 0; i < m; i++ {
		k := uint64(s.done + i)
		site := 0x1000 + (k*7919)%s.distinct
		switch {
		case s.tool == formats.ToolCall && (k%2 == 0 || s.onlyCalls):
			s.b.Kind[i], s.b.Src[i], s.b.Dst[i] = uint8(formats.KindCall), site, 0x1100+site%0x100
		case s.tool == formats.ToolCall:
			s.b.Kind[i], s.b.Src[i], s.b.Dst[i] = uint8(formats.KindRet), 0x1150, 0x1000+((k-1)*7919)%s.distinct+5
		default:
			s.b.Kind[i], s.b.Src[i], s.b.Dst[i] = uint8(formats.KindJccTaken), site, site+0x10
		}
		s.b.TID[i] = uint32(k / 2 % 4)
	}
	s.done += m
	return true
}

func benchmarkWrite(b *testing.B, f Format, tool formats.Tool) {
	const events = 1 << 20
	b.SetBytes(events) // "MB/s" reads as million events per second
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		src := &genSource{tool: tool, n: events, distinct: 0x800}
		if _, err := Write(context.Background(), io.Discard, f, src, Options{Symbolize: testSymbols}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCollapsedCalls(b *testing.B) { benchmarkWrite(b, Collapsed, formats.ToolCall) }
func BenchmarkPProfBranch(b *testing.B)    { benchmarkWrite(b, PProf, formats.ToolBranch) }
func BenchmarkDrCovBranch(b *testing.B)    { benchmarkWrite(b, DrCov, formats.ToolBranch) }
func BenchmarkCSVBranch(b *testing.B)      { benchmarkWrite(b, CSV, formats.ToolBranch) }
