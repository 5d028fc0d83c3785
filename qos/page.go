package qos

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stint-project/stint/runtime"
)

// State is the page's state field (runtime.QoSStarting ...).
type State uint32

// Page states, as in stint_abi.h.
const (
	Starting = State(runtime.QoSStarting) // no sample yet
	Running  = State(runtime.QoSRunning)  // Value is the latest sample
	Failing  = State(runtime.QoSFailing)  // the source stopped answering
	Stopped  = State(runtime.QoSStopped)  // the analyzer exited
)

func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Running:
		return "running"
	case Failing:
		return "failing"
	case Stopped:
		return "stopped"
	}
	return fmt.Sprintf("state(%d)", uint32(s))
}

// Tuning selects the denominator of QDIME's Equation 1 (stint_abi.h).
type Tuning uint32

// Tunings, as in stint_abi.h.
const (
	TuneSum   = Tuning(runtime.QoSTuneSum)   // (v-T)/(v+T)*P, the paper's choice
	TuneSpan  = Tuning(runtime.QoSTuneSpan)  // (v-T)/(M-T)*P, M = the best value expected
	TuneValue = Tuning(runtime.QoSTuneValue) // (v-T)/v*P; lower is better: (T-v)/T*P
)

func (t Tuning) String() string {
	switch t {
	case TuneSum:
		return "sum"
	case TuneSpan:
		return "span"
	case TuneValue:
		return "value"
	}
	return fmt.Sprintf("tuning(%d)", uint32(t))
}

// ParseTuning parses "sum", "span" or "value".
func ParseTuning(s string) (Tuning, error) {
	for _, t := range []Tuning{TuneSum, TuneSpan, TuneValue} {
		if t.String() == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("tuning %q: want sum, span or value", s)
}

// Offsets of struct stint_qos_page's fields (stint_abi.h; pinned by
// TestPageLayout against runtime.QoSPage).
const (
	offMagic     = 0
	offVersion   = 8
	offFlags     = 12
	offTuning    = 16
	offState     = 20
	offSeq       = 24
	offThreshold = 32
	offMax       = 40
	offValue     = 48
	offSampleNS  = 56
	offInterval  = 64
	offSamples   = 72
	offPID       = 80
	offSource    = 88
	sourceSize   = 128
)

// Config is what the analyzer tells the runtime besides the samples.
type Config struct {
	Threshold     float64       // T
	Max           float64       // M, for TuneSpan
	Tuning        Tuning        // the denominator of Equation 1
	LowerIsBetter bool          // the threshold is a ceiling (latency)
	Interval      time.Duration // how often the analyzer samples (the period)
	Source        string        // the metric source, for people (cut to 127 bytes)
}

// Check reports a configuration the runtime could not use as an error.
func (c Config) Check() error {
	if math.IsNaN(c.Threshold) || math.IsInf(c.Threshold, 0) || c.Threshold <= 0 {
		return fmt.Errorf("threshold %v: want a finite number > 0", c.Threshold)
	}
	switch c.Tuning {
	case TuneSum, TuneValue:
	case TuneSpan:
		if math.IsNaN(c.Max) || math.IsInf(c.Max, 0) || c.Max < 0 {
			return fmt.Errorf("max %v: want a finite number >= 0", c.Max)
		}
		if c.LowerIsBetter && c.Max >= c.Threshold {
			return fmt.Errorf("tuning span, lower is better: max %g must be below the threshold %g (the best value expected)", c.Max, c.Threshold)
		}
		if !c.LowerIsBetter && c.Max <= c.Threshold {
			return fmt.Errorf("tuning span: max %g must be above the threshold %g (the best value expected)", c.Max, c.Threshold)
		}
	default:
		return fmt.Errorf("tuning %d: want sum, span or value", uint32(c.Tuning))
	}
	if c.Interval <= 0 {
		return fmt.Errorf("interval %v: want > 0", c.Interval)
	}
	return nil
}

// ErrPageInUse is returned when another analyzer holds the page.
var ErrPageInUse = errors.New("another analyzer is writing this QoS page")

// Page is a QoS page opened for writing: the analyzer's side of the
// contract. Its methods are not safe for concurrent use.
type Page struct {
	path    string
	f       *os.File
	mem     []byte
	created bool
	samples uint64
}

// DefaultPagePath returns a fresh page path, /dev/shm/stint-qos.<pid>.<random>
// (the system's temporary directory when /dev/shm is missing).
func DefaultPagePath() string {
	dir := "/dev/shm"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = os.TempDir()
	}
	var r [4]byte
	rand.Read(r[:])
	return filepath.Join(dir, fmt.Sprintf("stint-qos.%d.%s", os.Getpid(), hex.EncodeToString(r[:])))
}

// CreatePage creates the page file at path (or takes over an existing
// QoS page there: a runtime that already mapped it keeps reading the same
// file), maps it shared and publishes cfg with state Starting. A file at
// path that is neither empty nor a QoS page is refused, and so is a page
// that another live analyzer holds (ErrPageInUse; the lock is flock on
// the file).
func CreatePage(path string, cfg Config) (*Page, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	created := err == nil
	if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("qos page: %w", err)
	}
	p := &Page{path: path, f: f, created: created}
	if err := p.setup(cfg); err != nil {
		f.Close()
		if created {
			os.Remove(path)
		}
		return nil, err
	}
	return p, nil
}

func (p *Page) setup(cfg Config) error {
	if err := unix.Flock(int(p.f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("qos page %s: %w", p.path, ErrPageInUse)
		}
		return fmt.Errorf("qos page %s: lock: %w", p.path, err)
	}
	st, err := p.f.Stat()
	if err != nil {
		return fmt.Errorf("qos page: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("qos page %s: not a regular file", p.path)
	}
	if st.Size() != 0 {
		// Only ever overwrite a QoS page (of any version: same magic).
		var head [8]byte
		if st.Size() != runtime.QoSPageSize {
			return fmt.Errorf("qos page %s: exists and is %d bytes, not a QoS page; refusing to overwrite it", p.path, st.Size())
		}
		if _, err := p.f.ReadAt(head[:], 0); err != nil {
			return fmt.Errorf("qos page %s: %w", p.path, err)
		}
		if m := binary.LittleEndian.Uint64(head[:]); m != runtime.QoSMagic && m != 0 {
			return fmt.Errorf("qos page %s: exists and is not a QoS page (magic %#x); refusing to overwrite it", p.path, m)
		}
	} else if err := p.f.Truncate(runtime.QoSPageSize); err != nil {
		return fmt.Errorf("qos page %s: %w", p.path, err)
	}
	mem, err := unix.Mmap(int(p.f.Fd()), 0, runtime.QoSPageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("qos page %s: mmap: %w", p.path, err)
	}
	p.mem = mem
	// Everything below is written inside one seqlock write, so a runtime
	// that already maps this file (a page left by an earlier analyzer)
	// sees either the old page or the new one. A new file's magic is
	// stored last: the runtime maps a page only once its magic is set.
	p.begin()
	p.store32(offVersion, runtime.QoSVersion)
	var flags uint32
	if cfg.LowerIsBetter {
		flags |= runtime.QoSLowerIsBetter
	}
	p.store32(offFlags, flags)
	p.store32(offTuning, uint32(cfg.Tuning))
	p.store32(offState, uint32(Starting))
	p.store64(offThreshold, math.Float64bits(cfg.Threshold))
	var max uint64
	if cfg.Tuning == TuneSpan {
		max = math.Float64bits(cfg.Max)
	}
	p.store64(offMax, max)
	p.store64(offValue, 0)
	p.store64(offSampleNS, 0)
	p.store64(offInterval, uint64(cfg.Interval))
	p.store64(offSamples, 0)
	p.store32(offPID, uint32(os.Getpid()))
	src := make([]byte, sourceSize)
	copy(src[:sourceSize-1], cfg.Source)
	copy(p.mem[offSource:offSource+sourceSize], src)
	clear(p.mem[offSource+sourceSize:])
	p.store64(offMagic, runtime.QoSMagic)
	p.end()
	return nil
}

// Path returns the page's file name (what STINT_QOS must say).
func (p *Page) Path() string { return p.path }

// Created reports whether CreatePage created the file (rather than taking
// over an existing page).
func (p *Page) Created() bool { return p.created }

func (p *Page) word64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&p.mem[off])) }
func (p *Page) word32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&p.mem[off])) }

func (p *Page) store64(off int, v uint64) { atomic.StoreUint64(p.word64(off), v) }
func (p *Page) store32(off int, v uint32) { atomic.StoreUint32(p.word32(off), v) }

// begin makes seq odd: a reader retries until end.
func (p *Page) begin() {
	s := atomic.LoadUint64(p.word64(offSeq))
	if s&1 == 0 {
		s++
	} else {
		s += 2 // an earlier writer died mid-sample
	}
	atomic.StoreUint64(p.word64(offSeq), s)
}

// end makes seq even again (and larger than before begin).
func (p *Page) end() {
	s := atomic.LoadUint64(p.word64(offSeq))
	atomic.StoreUint64(p.word64(offSeq), s+1)
}

// Publish publishes a sample v taken at mono (CLOCK_MONOTONIC) and sets
// state Running. v must be finite and >= 0.
func (p *Page) Publish(v float64, mono time.Duration) error {
	if p.mem == nil {
		return errors.New("qos page: closed")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("metric value %v: want a finite number >= 0", v)
	}
	p.samples++
	p.begin()
	p.store64(offValue, math.Float64bits(v))
	p.store64(offSampleNS, uint64(mono))
	p.store64(offSamples, p.samples)
	p.store32(offState, uint32(Running))
	p.end()
	return nil
}

// SetState sets the page's state (Failing, Stopped, ...), keeping the
// last sample for people (the runtime uses it only while Running).
func (p *Page) SetState(s State) error {
	if p.mem == nil {
		return errors.New("qos page: closed")
	}
	p.begin()
	p.store32(offState, uint32(s))
	p.end()
	return nil
}

// Snapshot reads the page as a reader would.
func (p *Page) Snapshot() (Snapshot, error) {
	if p.mem == nil {
		return Snapshot{}, errors.New("qos page: closed")
	}
	return readSeq(p.mem)
}

// Close sets state Stopped, unmaps and closes the page; the file stays.
func (p *Page) Close() error {
	if p.mem == nil {
		return nil
	}
	p.SetState(Stopped)
	err := unix.Munmap(p.mem)
	p.mem = nil
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Remove closes the page (state Stopped) and removes its file.
func (p *Page) Remove() error {
	err := p.Close()
	if rerr := os.Remove(p.path); err == nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	return err
}

// Snapshot is one consistent reading of a QoS page.
type Snapshot struct {
	Magic         uint64
	Version       uint32
	LowerIsBetter bool
	Flags         uint32
	Tuning        Tuning
	State         State
	Seq           uint64
	Threshold     float64
	Max           float64
	Value         float64
	SampleMono    time.Duration // CLOCK_MONOTONIC of Value; 0 = none yet
	Interval      time.Duration
	Samples       uint64
	AnalyzerPID   uint32
	Source        string
}

// PageError says why bytes are not a QoS page this package can read.
type PageError struct {
	Off int64 // offset of the offending field
	Msg string
}

func (e *PageError) Error() string {
	return fmt.Sprintf("not a QoS page: %s (at offset %d)", e.Msg, e.Off)
}

// ParsePage decodes a page image (no seqlock: for a copy that is not
// being written, such as a file read whole).
func ParsePage(b []byte) (Snapshot, error) {
	if len(b) != runtime.QoSPageSize {
		return Snapshot{}, &PageError{Off: int64(len(b)), Msg: fmt.Sprintf("%d bytes, want %d", len(b), runtime.QoSPageSize)}
	}
	le := binary.LittleEndian
	s := Snapshot{
		Magic:       le.Uint64(b[offMagic:]),
		Version:     le.Uint32(b[offVersion:]),
		Flags:       le.Uint32(b[offFlags:]),
		Tuning:      Tuning(le.Uint32(b[offTuning:])),
		State:       State(le.Uint32(b[offState:])),
		Seq:         le.Uint64(b[offSeq:]),
		Threshold:   math.Float64frombits(le.Uint64(b[offThreshold:])),
		Max:         math.Float64frombits(le.Uint64(b[offMax:])),
		Value:       math.Float64frombits(le.Uint64(b[offValue:])),
		SampleMono:  time.Duration(le.Uint64(b[offSampleNS:])),
		Interval:    time.Duration(le.Uint64(b[offInterval:])),
		Samples:     le.Uint64(b[offSamples:]),
		AnalyzerPID: le.Uint32(b[offPID:]),
	}
	src := b[offSource : offSource+sourceSize]
	if i := indexZero(src); i >= 0 {
		src = src[:i]
	}
	s.Source = string(src)
	s.LowerIsBetter = s.Flags&runtime.QoSLowerIsBetter != 0
	switch {
	case s.Magic == 0:
		return s, &PageError{Off: offMagic, Msg: "magic is zero (the page is still being created, or empty)"}
	case s.Magic != runtime.QoSMagic:
		return s, &PageError{Off: offMagic, Msg: fmt.Sprintf("magic %#x, want %#x", s.Magic, runtime.QoSMagic)}
	case s.Version != runtime.QoSVersion:
		return s, &PageError{Off: offVersion, Msg: fmt.Sprintf("version %d, this stint reads version %d", s.Version, runtime.QoSVersion)}
	}
	return s, nil
}

func indexZero(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

// readSeq copies a live page under its seqlock and decodes it.
func readSeq(mem []byte) (Snapshot, error) {
	buf := make([]byte, runtime.QoSPageSize)
	seq := (*uint64)(unsafe.Pointer(&mem[offSeq]))
	for tries := 0; ; tries++ {
		s0 := atomic.LoadUint64(seq)
		if s0&1 == 0 {
			// Copy word by word with atomic loads: the writer stores
			// the same way, so the copy is race-free.
			for off := 0; off < offSource; off += 8 {
				binary.LittleEndian.PutUint64(buf[off:], atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[off]))))
			}
			copy(buf[offSource:], mem[offSource:])
			if atomic.LoadUint64(seq) == s0 {
				binary.LittleEndian.PutUint64(buf[offSeq:], s0)
				return ParsePage(buf)
			}
		}
		if tries >= 1000 {
			return Snapshot{}, errors.New("qos page: the writer stayed in the middle of a sample (seq odd) for 1000 reads")
		}
		time.Sleep(time.Microsecond)
	}
}

// ReadPage maps the page file at path read-only and returns a consistent
// snapshot of it (the seqlock is honoured), with clear errors for a file
// that is missing, of the wrong size, magic or version.
func ReadPage(path string) (Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return Snapshot{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Snapshot{}, err
	}
	if !st.Mode().IsRegular() {
		return Snapshot{}, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() != runtime.QoSPageSize {
		return Snapshot{}, fmt.Errorf("%s: %w", path, &PageError{Off: st.Size(), Msg: fmt.Sprintf("file is %d bytes, want %d", st.Size(), runtime.QoSPageSize)})
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, runtime.QoSPageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s: mmap: %w", path, err)
	}
	defer unix.Munmap(mem)
	s, err := readSeq(mem)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
