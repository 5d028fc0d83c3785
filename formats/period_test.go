package formats

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

func periodRow(start, index, granted, used uint64) Event {
	return Event{Kind: KindPeriod, Time: start, SrcModule: NoModule, DstModule: NoModule, Src: index, Dst: granted, Value: used}
}

func statsRow(start, recorded, suppressed, enabled uint64) Event {
	return Event{Kind: KindPeriodStats, Time: start, SrcModule: NoModule, DstModule: NoModule, Src: recorded, Dst: suppressed, Value: enabled}
}

func TestPeriods(t *testing.T) {
	ev := Event{Kind: KindJccTaken, Time: 150, Src: 1, Dst: 2}
	qos := Event{Kind: KindPeriodQoS, Time: 200, SrcModule: NoModule, DstModule: NoModule,
		Src: math.Float64bits(0.5), Dst: math.Float64bits(0.75), Value: 7000}
	end := Event{Kind: KindRunEnd, Time: 400, Value: 300}
	tests := []struct {
		name string
		rows []Event
		want []Period
	}{
		{"none", []Event{ev, end}, nil},
		{"two periods, one overshoot", []Event{
			periodRow(100, 0, 10000, 9000), ev, statsRow(100, 5, 2, 100),
			periodRow(200, 1, 10000, 12500), statsRow(200, 7, 0, 80), end,
		}, []Period{
			{HasBudget: true, Index: 0, Start: 100, Granted: 10000, Used: 9000, HasStats: true, Recorded: 5, Suppressed: 2, Enabled: 100},
			{HasBudget: true, Index: 1, Start: 200, Granted: 10000, Used: 12500, Overshoot: 2500, HasStats: true, Recorded: 7, Enabled: 80},
		}},
		{"stats before period, qos, out of order", []Event{
			statsRow(200, 7, 1, 80), qos, periodRow(200, 1, 10000, 10000), periodRow(100, 0, 5, 6),
		}, []Period{
			{HasBudget: true, Index: 0, Start: 100, Granted: 5, Used: 6, Overshoot: 1},
			{HasBudget: true, Index: 1, Start: 200, Granted: 10000, Used: 10000, HasStats: true, Recorded: 7, Suppressed: 1, Enabled: 80,
				HasQoS: true, Metric: 0.5, Threshold: 0.75, QoSBudget: 7000},
		}},
		{"switch row", []Event{
			periodRow(100, 0, 10000, 9000),
			{Kind: KindPeriodSwitch, Time: 100, SrcModule: NoModule, DstModule: NoModule, Src: 12, Dst: 30, Value: 4500},
		}, []Period{
			{HasBudget: true, Index: 0, Start: 100, Granted: 10000, Used: 9000, HasSwitch: true, SwitchedOn: 12, SwitchedOff: 30, SwitchNS: 4500},
		}},
		{"close row", []Event{
			{Kind: KindPeriodClose, Time: 100, SrcModule: NoModule, DstModule: NoModule, Src: CloseByCharge, Dst: 700, Value: 9400},
			periodRow(100, 0, 10000, 9900),
		}, []Period{
			{HasBudget: true, Index: 0, Start: 100, Granted: 10000, Used: 9900, HasClose: true, ClosedHow: CloseByCharge, CloseReserve: 700, CloseUsed: 9400},
		}},
		{"stats without period (cut)", []Event{statsRow(300, 1, 2, 3)}, []Period{
			{Start: 300, HasStats: true, Recorded: 1, Suppressed: 2, Enabled: 3},
		}},
		{"two period rows with one start stay apart", []Event{
			periodRow(100, 0, 10, 20), periodRow(100, 1, 10, 5),
		}, []Period{
			{HasBudget: true, Index: 0, Start: 100, Granted: 10, Used: 20, Overshoot: 10},
			{HasBudget: true, Index: 1, Start: 100, Granted: 10, Used: 5},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			have := Periods(tt.rows)
			if !reflect.DeepEqual(have, tt.want) {
				t.Errorf("have %+v\nwant %+v", have, tt.want)
			}
		})
	}
}

func TestPeriodBuilderAdd(t *testing.T) {
	var b PeriodBuilder
	for k := Kind(0); k < 40; k++ {
		want := k == KindPeriod || k == KindPeriodStats || k == KindPeriodQoS || k == KindPeriodSwitch || k == KindPeriodClose
		if have := b.Add(Event{Kind: k}); have != want {
			t.Errorf("Add(kind %s) = %v, want %v", k, have, want)
		}
	}
}

// TestPeriodsRoundTrip writes period rows with [Writer] and reads them
// back: what a merge or cov compare sees.
func TestPeriodsRoundTrip(t *testing.T) {
	rows := []Event{periodRow(100, 0, 10000, 12000), statsRow(100, 3, 4, 50), {Kind: KindCall, Time: 120, Src: 1, Dst: 2}}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testRun(), testModules(), WithBatchRows(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	tr, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	ps := Periods(tr.Events)
	if len(ps) != 1 || ps[0].Overshoot != 2000 || ps[0].Suppressed != 4 {
		t.Errorf("have %+v, want one period with overshoot 2000 and 4 suppressed", ps)
	}
}
