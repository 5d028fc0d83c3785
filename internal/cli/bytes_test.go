package cli

import "testing"

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"4096", 4096, true}, {"64K", 64 << 10, true}, {"16M", 16 << 20, true}, {"1MiB", 1 << 20, true},
		{"2gb", 2 << 30, true}, {"1T", 1 << 40, true}, {"0", 0, true},
		{"", 0, false}, {"M", 0, false}, {"12Q", 0, false}, {"-1", 0, false}, {"1.5M", 0, false},
		{"17179869184G", 0, false},
	} {
		got, err := ParseBytes(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
