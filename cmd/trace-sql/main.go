// Command trace-sql runs SQL over a Parquet export of stint traces
// ('trace export -f parquet') with an embedded DuckDB; 'trace sql' runs
// it over traces. DuckDB is C++, so this command needs cgo; built
// without it, it says so and exits 1, and no other stint command needs
// cgo.
package main

import "github.com/stint-project/stint/internal/cli"

func main() { cli.Main("trace-sql", run) }

const help = `Usage: trace-sql [--format table|csv|json] [--memory-limit SIZE] EVENTS.parquet QUERY

Run QUERY with an embedded DuckDB over a Parquet export of stint traces
('trace export -f parquet -o EVENTS.parquet TRACE...', which writes the
module and run tables beside it), seen as the views events, rows,
periods, modules and runs ('trace sql --help' describes them). 'trace
sql QUERY TRACE...' exports the traces and runs this command.

Flags:
      --format F   table (default), csv or json (one object a line)
      --memory-limit SIZE
                   DuckDB's memory (default 1G; K, M, G suffixes): what
                   does not fit spills to a temporary directory, removed
                   at exit; below about 64M a large load fails
      --arrow      read the rows as an Arrow IPC stream on standard input
                   ('trace export -f arrow'; 'trace sql' does this), the
                   module and run tables beside EVENTS.parquet as usual;
                   a build without DuckDB's Arrow interface (build tag
                   duckdb_arrow) exits 3

Example:
  trace export -f parquet -o run.parquet run.arrow
  trace-sql run.parquet "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY n DESC"

Exit status: 0 ok, 1 error (the query's too), 2 usage error, 3 --arrow
not built in.
`
