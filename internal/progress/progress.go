// Package progress draws a one-line progress report for long work (reading
// large traces, merging, exporting) on a terminal, and stays quiet
// otherwise.
//
// A [Bar] draws only when its writer is a terminal (an *os.File for which
// the TCGETS ioctl succeeds, with TERM not "dumb"), so a command can always
// pass its stderr: in a pipe, a log file or a test buffer nothing is
// written. Drawing is throttled (every 100 ms by default), uses "\r" and
// the erase-line escape, and [Bar.Done] erases the line, so the command's
// own output is never mixed with it.
//
//	bar := progress.New(stderr, "reading traces", progress.Total(size), progress.Bytes())
//	defer bar.Done()
//	for r.Next() {
//		...
//		bar.Set(done + r.Offset())
//	}
//
// Every method is safe for concurrent use and does nothing on a nil *Bar,
// so code that reports progress needs no checks when there is none.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultInterval is the least time between two drawings of a [Bar].
const DefaultInterval = 100 * time.Millisecond

// Option configures a [Bar].
type Option func(*Bar)

// Total sets the amount of work (in the bar's unit); 0 or less: unknown
// (the bar shows the amount done and no percentage).
func Total(n int64) Option { return func(b *Bar) { b.total = n } }

// Bytes shows amounts as bytes (KiB, MiB, GiB) rather than plain counts.
func Bytes() Option { return func(b *Bar) { b.bytes = true } }

// Unit names the counted things, e.g. "events" (plain counts only).
func Unit(name string) Option { return func(b *Bar) { b.unit = name } }

// Interval sets the least time between two drawings (0: draw on every
// update; for tests).
func Interval(d time.Duration) Option { return func(b *Bar) { b.interval = d } }

// Terminal overrides the terminal detection: true draws to any writer,
// false never draws.
func Terminal(on bool) Option { return func(b *Bar) { b.forced, b.draws = true, on } }

// Width sets the line width used to truncate the line (default: the
// terminal's width, else 80).
func Width(cols int) Option { return func(b *Bar) { b.width = cols } }

// Bar reports the progress of one task on one line.
type Bar struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	total    int64
	done     int64
	bytes    bool
	unit     string
	interval time.Duration
	forced   bool
	draws    bool
	width    int
	last     time.Time
	drawn    bool // something is on the line
	finished bool
}

// New returns a bar labelled label that draws to w if w is a terminal.
func New(w io.Writer, label string, opts ...Option) *Bar {
	b := &Bar{w: w, label: label, interval: DefaultInterval}
	for _, o := range opts {
		o(b)
	}
	if !b.forced {
		b.draws = IsTerminal(w)
	}
	if b.width <= 0 {
		b.width = 80
		if f, ok := w.(*os.File); ok && b.draws {
			if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
				b.width = int(ws.Col)
			}
		}
	}
	return b
}

// IsTerminal reports whether w is a terminal that progress may be drawn
// on: an *os.File that is a tty, with TERM not set to "dumb".
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil || os.Getenv("TERM") == "dumb" {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Active reports whether the bar draws at all.
func (b *Bar) Active() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.draws && !b.finished
}

// SetLabel changes the label (e.g. to name the file being read).
func (b *Bar) SetLabel(label string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.label = label
	b.draw(false)
}

// SetTotal changes the amount of work.
func (b *Bar) SetTotal(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total = n
	b.draw(false)
}

// Add adds n to the work done.
func (b *Bar) Add(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	b.draw(false)
}

// Set sets the work done to n.
func (b *Bar) Set(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = n
	b.draw(false)
}

// Done erases the bar's line; later calls draw nothing. Call it before
// writing anything else to the bar's writer.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	if b.drawn {
		io.WriteString(b.w, "\r\x1b[K")
		b.drawn = false
	}
}

// draw writes the line if the bar draws and the interval has passed
// (always when force). b.mu is held.
func (b *Bar) draw(force bool) {
	if !b.draws || b.finished {
		return
	}
	now := time.Now()
	if !force && b.drawn && b.interval > 0 && now.Sub(b.last) < b.interval {
		return
	}
	b.last = now
	line := b.line()
	if r := []rune(line); len(r) > b.width-1 && b.width > 1 {
		line = string(r[:b.width-1])
	}
	io.WriteString(b.w, "\r\x1b[K"+line)
	b.drawn = true
}

// line formats the bar's text: "label  [=====>    ]  42%  1.2 MiB / 3.0 MiB".
func (b *Bar) line() string {
	var s strings.Builder
	s.WriteString(b.label)
	if b.total > 0 {
		frac := float64(b.done) / float64(b.total)
		frac = max(0, min(frac, 1))
		const cells = 24
		n := int(frac * cells)
		s.WriteString("  [")
		s.WriteString(strings.Repeat("=", n))
		if n < cells {
			s.WriteString(">")
			s.WriteString(strings.Repeat(" ", cells-n-1))
		}
		fmt.Fprintf(&s, "] %3.0f%%  %s / %s", 100*frac, b.amount(b.done), b.amount(b.total))
	} else {
		fmt.Fprintf(&s, "  %s", b.amount(b.done))
	}
	if b.unit != "" && !b.bytes {
		s.WriteString(" " + b.unit)
	}
	return s.String()
}

func (b *Bar) amount(n int64) string {
	if !b.bytes {
		return fmt.Sprint(n)
	}
	return FormatBytes(n)
}

// FormatBytes formats n bytes for people: "512 B", "1.5 KiB", "12.0 MiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit || u == "TiB" {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%d B", n)
}
