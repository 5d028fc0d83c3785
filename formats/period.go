package formats

import (
	"math"
	"slices"
)

// Period is one budget period of a run, assembled from its record rows
// ([KindPeriod], [KindPeriodStats] and, when a QoS metric drove the
// budget, [KindPeriodQoS]; [KindPeriodSwitch] with the off-switch;
// [KindPeriodClose] when its gate closed), which the runtime writes with
// the period's start as their time.
type Period struct {
	HasBudget bool   // a KindPeriod row was found for this period
	Index     uint64 // period index, 0 = the first
	Start     uint64 // CLOCK_MONOTONIC at the period's start, ns
	Granted   uint64 // budget granted, ns
	Used      uint64 // budget used, ns (measured; may exceed Granted)
	Overshoot uint64 // max(0, Used-Granted), ns

	HasStats   bool   // a KindPeriodStats row was found for this period
	Recorded   uint64 // events recorded
	Suppressed uint64 // runtime calls that recorded nothing
	Enabled    uint64 // ns the instrumentation was enabled

	HasQoS    bool    // a KindPeriodQoS row was found for this period
	Metric    float64 // QoS metric value
	Threshold float64 // QoS threshold
	QoSBudget uint64  // budget computed by the controller, ns

	HasSwitch   bool   // a KindPeriodSwitch row was found for this period
	SwitchedOn  uint64 // sites switched back on at the period's start
	SwitchedOff uint64 // sites switched off during the period
	SwitchNS    uint64 // ns the switching took (included in Used)

	HasClose     bool   // a KindPeriodClose row was found: the period's gate closed
	ClosedHow    uint64 // CloseByCharge, CloseAtStart or CloseAtRoll
	CloseReserve uint64 // ns the close kept in reserve
	CloseUsed    uint64 // ns of budget used when the gate closed
}

// PeriodBuilder assembles [Period] values from a stream of rows. Rows of
// one period are matched by their time (the period's start): a
// KindPeriod row opens the period, and KindPeriodStats, KindPeriodQoS,
// KindPeriodSwitch and KindPeriodClose rows with the same time complete
// it, in either order. A stats or QoS row whose KindPeriod row is
// missing (a trace cut between them) still makes a period, with
// HasBudget false and Index, Granted and Used zero.
//
// The zero value is ready to use.
type PeriodBuilder struct {
	periods []Period
	byStart map[uint64]int // period start -> index in periods
}

// IsPeriod reports whether k is one of the period rows' kinds (the rows a
// [PeriodBuilder] consumes).
func (k Kind) IsPeriod() bool {
	switch k {
	case KindPeriod, KindPeriodStats, KindPeriodQoS, KindPeriodSwitch, KindPeriodClose:
		return true
	}
	return false
}

// Add consumes e if it is a period row and reports whether it was; other
// rows (events, KindRunEnd) are ignored.
func (b *PeriodBuilder) Add(e Event) bool {
	if !e.Kind.IsPeriod() {
		return false
	}
	p := b.at(e.Time, e.Kind == KindPeriod)
	switch e.Kind {
	case KindPeriod:
		p.HasBudget = true
		p.Index, p.Granted, p.Used = e.Src, e.Dst, e.Value
		p.Overshoot = 0
		if p.Used > p.Granted {
			p.Overshoot = p.Used - p.Granted
		}
	case KindPeriodStats:
		p.HasStats = true
		p.Recorded, p.Suppressed, p.Enabled = e.Src, e.Dst, e.Value
	case KindPeriodQoS:
		p.HasQoS = true
		p.Metric = math.Float64frombits(e.Src)
		p.Threshold = math.Float64frombits(e.Dst)
		p.QoSBudget = e.Value
	case KindPeriodSwitch:
		p.HasSwitch = true
		p.SwitchedOn, p.SwitchedOff, p.SwitchNS = e.Src, e.Dst, e.Value
	case KindPeriodClose:
		p.HasClose = true
		p.ClosedHow, p.CloseReserve, p.CloseUsed = e.Src, e.Dst, e.Value
	}
	return true
}

// at returns the period starting at start, making one if there is none
// (or, for a KindPeriod row, if the one there already has its own
// KindPeriod row: two periods cannot share a start, but a hostile trace
// may say so, and each row then keeps its own period).
func (b *PeriodBuilder) at(start uint64, opens bool) *Period {
	if b.byStart == nil {
		b.byStart = make(map[uint64]int)
	}
	if i, ok := b.byStart[start]; ok {
		p := &b.periods[i]
		if !opens || !p.HasBudget {
			return p
		}
	}
	b.periods = append(b.periods, Period{Start: start})
	b.byStart[start] = len(b.periods) - 1
	return &b.periods[len(b.periods)-1]
}

// Periods returns the periods assembled so far, ordered by start time
// (then index). The slice is the caller's.
func (b *PeriodBuilder) Periods() []Period {
	ps := slices.Clone(b.periods)
	slices.SortStableFunc(ps, func(x, y Period) int {
		if x.Start != y.Start {
			if x.Start < y.Start {
				return -1
			}
			return 1
		}
		if x.Index != y.Index {
			if x.Index < y.Index {
				return -1
			}
			return 1
		}
		return 0
	})
	return ps
}

// Periods assembles the periods of a run from its rows (see
// [PeriodBuilder]); rows that are not period rows are skipped.
func Periods(rows []Event) []Period {
	var b PeriodBuilder
	for _, e := range rows {
		b.Add(e)
	}
	return b.Periods()
}
