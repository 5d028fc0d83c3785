package cli

import (
	"errors"
	"fmt"
	"testing"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain", errors.New("boom"), 1},
		{"usage", Usagef("bad flag %q", "x"), 2},
		{"wrapped usage", fmt.Errorf("compare: %w", Usagef("no runs")), 2},
		{"child status", &ExitStatus{Code: 7}, 7},
		{"wrapped status", fmt.Errorf("run: %w", &ExitStatus{Code: 130, Msg: "killed"}), 130},
	}
	for _, tt := range tests {
		if have := ExitCode(tt.err); have != tt.want {
			t.Errorf("%s: have %d, want %d", tt.name, have, tt.want)
		}
	}
	inner := errors.New("inner")
	if ue := Usagef("wrap: %w", inner); !errors.Is(ue, inner) {
		t.Errorf("Usagef does not wrap %%w: %v", ue)
	}
}
