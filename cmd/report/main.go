// Command report turns stint traces into one self-contained HTML page.
//
//	$ report auto --full full/*.arrow run1/*.arrow run2/*.arrow -o report.html
//	report.html: 2 runs, coverage 100.0%, 6 sections
//	$ report render notebook.md -o notebook.html
//	notebook.html: 4 cells
//
// See 'report help' for the notebook's cell syntax. Exit status: 0 ok,
// 1 error (for render: also when a cell failed; the page is written
// first), 2 usage error.
package main

import "github.com/stint-project/stint/internal/cli"

func main() { cli.Main("report", run) }
