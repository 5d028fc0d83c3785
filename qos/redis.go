package qos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// RESP (the Redis serialization protocol, version 2), the part a client
// needs to read replies: simple strings (+), errors (-), integers (:),
// bulk strings ($, -1 = null) and arrays (*, -1 = null).

// RESPError is a reply that is not valid RESP, at a byte offset of the
// reply stream.
type RESPError struct {
	Off int64
	Msg string
}

func (e *RESPError) Error() string { return fmt.Sprintf("RESP: %s at byte %d", e.Msg, e.Off) }

// RedisError is an error reply from the server ("-ERR ...").
type RedisError string

func (e RedisError) Error() string { return "redis: " + string(e) }

// Reply is one RESP value: Kind is '+', '-', ':', '$' or '*'.
type Reply struct {
	Kind  byte
	Str   string  // '+', '-', '$'
	Int   int64   // ':'
	Null  bool    // '$' or '*' with length -1
	Elems []Reply // '*'
}

// Limits on what ReadReply accepts, so a hostile server cannot make us
// allocate without bound: INFO is a few KiB.
const (
	maxBulk  = 16 << 20
	maxArray = 1 << 16
	maxDepth = 8
	maxLine  = 64 << 10
)

// RESPReader reads RESP replies and counts the bytes it consumed (for
// error offsets).
type RESPReader struct {
	r   *bufio.Reader
	off int64
}

// NewRESPReader reads replies from r.
func NewRESPReader(r io.Reader) *RESPReader { return &RESPReader{r: bufio.NewReader(r)} }

// ReadReply reads one reply. An error reply is returned as a Reply of
// kind '-', not as an error; malformed input gives a *RESPError.
func (rr *RESPReader) ReadReply() (Reply, error) { return rr.read(0) }

func (rr *RESPReader) line() (string, error) {
	start := rr.off
	var b []byte
	for {
		frag, err := rr.r.ReadSlice('\n')
		b = append(b, frag...)
		rr.off += int64(len(frag))
		if err == bufio.ErrBufferFull && len(b) < maxLine {
			continue
		}
		if err == bufio.ErrBufferFull {
			return "", &RESPError{start, "line longer than 64 KiB"}
		}
		if err == io.EOF && len(b) > 0 {
			return "", &RESPError{rr.off, "connection closed inside a reply"}
		}
		if err != nil {
			return "", err
		}
		break
	}
	if len(b) < 2 || b[len(b)-2] != '\r' {
		return "", &RESPError{start, "line not ended by CRLF"}
	}
	return string(b[:len(b)-2]), nil
}

func (rr *RESPReader) read(depth int) (Reply, error) {
	start := rr.off
	l, err := rr.line()
	if err != nil {
		return Reply{}, err
	}
	if l == "" {
		return Reply{}, &RESPError{start, "empty line where a reply was expected"}
	}
	rep := Reply{Kind: l[0]}
	body := l[1:]
	switch l[0] {
	case '+', '-':
		rep.Str = body
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return Reply{}, &RESPError{start, fmt.Sprintf("bad integer %q", body)}
		}
		rep.Int = n
	case '$':
		n, err := strconv.ParseInt(body, 10, 64)
		switch {
		case err != nil || n < -1:
			return Reply{}, &RESPError{start, fmt.Sprintf("bad bulk length %q", body)}
		case n == -1:
			rep.Null = true
			return rep, nil
		case n > maxBulk:
			return Reply{}, &RESPError{start, fmt.Sprintf("bulk string of %d bytes (limit %d)", n, maxBulk)}
		}
		// Grow the buffer as bytes arrive, not by the length the peer
		// announced.
		var bb bytes.Buffer
		k, err := io.CopyN(&bb, rr.r, n+2)
		rr.off += k
		if err != nil {
			if errors.Is(err, io.EOF) {
				return Reply{}, &RESPError{rr.off, "connection closed inside a bulk string"}
			}
			return Reply{}, err
		}
		buf := bb.Bytes()
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Reply{}, &RESPError{rr.off - 2, "bulk string not ended by CRLF"}
		}
		rep.Str = string(buf[:n])
	case '*':
		n, err := strconv.ParseInt(body, 10, 64)
		switch {
		case err != nil || n < -1:
			return Reply{}, &RESPError{start, fmt.Sprintf("bad array length %q", body)}
		case n == -1:
			rep.Null = true
			return rep, nil
		case n > maxArray:
			return Reply{}, &RESPError{start, fmt.Sprintf("array of %d elements (limit %d)", n, maxArray)}
		case depth >= maxDepth:
			return Reply{}, &RESPError{start, "arrays nested too deep"}
		}
		rep.Elems = make([]Reply, 0, min(n, 64))
		for i := int64(0); i < n; i++ {
			e, err := rr.read(depth + 1)
			if err != nil {
				return Reply{}, err
			}
			rep.Elems = append(rep.Elems, e)
		}
	default:
		return Reply{}, &RESPError{start, fmt.Sprintf("unknown reply type %q", l[0])}
	}
	return rep, nil
}

// AppendCommand appends a command as a RESP array of bulk strings.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// ParseInfo reads the text of an INFO reply into field -> value.
func ParseInfo(text string) map[string]string {
	m := make(map[string]string)
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimRight(l, "\r")
		if l == "" || l[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// redisSource is redis://[[USER]:PASSWORD@]HOST:PORT[?field=NAME|?rate=NAME].
//
// By default it is the rate of total_commands_processed (INFO stats):
// the commands the server really executed per second over the time that
// passed between our two INFO calls, less our own INFO (and AUTH)
// commands. We prefer that to instantaneous_ops_per_sec, which is the
// server's own average over its last 16 samples taken every 100 ms: a
// window of about 1.6 s that does not match our period and lags behind
// a change. ?field=NAME publishes another INFO field as it is (a gauge:
// instantaneous_ops_per_sec, connected_clients, used_memory, ...);
// ?rate=NAME the per-second rate of a counter field
// (total_net_input_bytes, keyspace_hits, ...).
type redisSource struct {
	spec, addr string
	user, pass string
	field      string
	rate       bool
	opt        SourceOptions
	conn       net.Conn
	rr         *RESPReader
	k          counter
	sent       float64 // our commands sent so far (AUTH, INFO)
}

func newRedis(spec string, opt SourceOptions) (*redisSource, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return nil, &SourceError{spec, "want redis://HOST:PORT[?field=NAME|?rate=NAME]: " + err.Error()}
	}
	if u.Host == "" || u.Port() == "" || u.Hostname() == "" {
		return nil, &SourceError{spec, "want redis://HOST:PORT, e.g. redis://127.0.0.1:6379"}
	}
	if _, err := strconv.ParseUint(u.Port(), 10, 16); err != nil {
		return nil, &SourceError{spec, fmt.Sprintf("bad port %q", u.Port())}
	}
	if u.Path != "" && u.Path != "/" {
		return nil, &SourceError{spec, "database paths are not used: INFO is server-wide; remove " + u.Path}
	}
	s := &redisSource{spec: spec, addr: u.Host, opt: opt, field: "total_commands_processed", rate: true}
	if u.User != nil {
		s.user = u.User.Username()
		s.pass, _ = u.User.Password()
	}
	q := u.Query()
	for k := range q {
		if k != "field" && k != "rate" {
			return nil, &SourceError{spec, fmt.Sprintf("unknown parameter %q (want field=NAME or rate=NAME)", k)}
		}
	}
	switch f, r := q.Get("field"), q.Get("rate"); {
	case f != "" && r != "":
		return nil, &SourceError{spec, "give field=NAME (a value) or rate=NAME (a counter), not both"}
	case f != "":
		s.field, s.rate = f, false
	case r != "":
		s.field = r
	case q.Has("field") || q.Has("rate"):
		return nil, &SourceError{spec, "empty field name"}
	}
	return s, nil
}

func (s *redisSource) String() string {
	if s.rate {
		return fmt.Sprintf("redis://%s rate(%s)", s.addr, s.field)
	}
	return fmt.Sprintf("redis://%s %s", s.addr, s.field)
}

func (s *redisSource) Close() error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn, s.rr = nil, nil
	return err
}

func (s *redisSource) do(args ...string) (Reply, error) {
	if _, err := s.conn.Write(AppendCommand(nil, args...)); err != nil {
		return Reply{}, err
	}
	s.sent++
	r, err := s.rr.ReadReply()
	if err != nil {
		return r, err
	}
	if r.Kind == '-' {
		return r, RedisError(r.Str)
	}
	return r, nil
}

func (s *redisSource) Sample(ctx context.Context) (float64, bool, error) {
	v, ok, err := s.sample(ctx)
	if err != nil {
		s.Close()
		s.k.forget()
		return 0, false, fmt.Errorf("redis %s: %w", s.addr, err)
	}
	return v, ok, nil
}

func (s *redisSource) sample(ctx context.Context) (float64, bool, error) {
	dl := deadline(ctx, s.opt.Period)
	if s.conn == nil {
		d := net.Dialer{Deadline: dl}
		c, err := d.DialContext(ctx, "tcp", s.addr)
		if err != nil {
			return 0, false, err
		}
		s.conn, s.rr = c, NewRESPReader(c)
		if s.pass != "" {
			args := []string{"AUTH", s.pass}
			if s.user != "" {
				args = []string{"AUTH", s.user, s.pass}
			}
			s.conn.SetDeadline(dl)
			if _, err := s.do(args...); err != nil {
				return 0, false, fmt.Errorf("AUTH: %w", err)
			}
		}
	}
	s.conn.SetDeadline(dl)
	args := []string{"INFO", "stats"}
	if s.field != "total_commands_processed" {
		args = args[:1] // the default sections: server, clients, memory, stats, ...
	}
	rep, err := s.do(args...)
	if err != nil {
		return 0, false, err
	}
	now := s.opt.clock()()
	if rep.Kind != '$' || rep.Null {
		return 0, false, fmt.Errorf("INFO replied with a %q reply, want a bulk string", rep.Kind)
	}
	raw, ok := ParseInfo(rep.Str)[s.field]
	if !ok {
		return 0, false, fmt.Errorf("INFO has no field %q", s.field)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
	if err != nil {
		return 0, false, fmt.Errorf("INFO field %s = %q is not a number", s.field, raw)
	}
	if !s.rate {
		return v, true, nil
	}
	if s.field == "total_commands_processed" {
		// The server counts a command after running it, so this count
		// includes every command we sent except this INFO. Taking them
		// off leaves a count whose differences are the other clients'
		// commands alone.
		v -= s.sent - 1
	}
	r, ok := s.k.observe(v, now)
	return max(r, 0), ok, nil
}
