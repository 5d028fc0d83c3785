package formats

import "github.com/apache/arrow-go/v18/arrow/memory"

// Option configures a [Reader] or a [Writer].
type Option func(*config)

type config struct {
	mem       memory.Allocator
	batchRows int
}

func newConfig(opts []Option) *config {
	c := &config{mem: memory.DefaultAllocator, batchRows: DefaultBatchRows}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithAllocator sets the allocator of the record batches a [Reader]
// returns.
func WithAllocator(mem memory.Allocator) Option {
	return func(c *config) {
		if mem != nil {
			c.mem = mem
		}
	}
}

// WithBatchRows sets the number of rows per record batch of a [Writer]
// (at least 1).
func WithBatchRows(n int) Option {
	return func(c *config) { c.batchRows = max(n, 1) }
}
