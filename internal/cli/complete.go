package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Shell completion. `NAME --completion bash|zsh|fish` prints a script for
// the shell; on TAB the script runs `NAME __complete WORD...` with the
// words after the command name, the one being completed last (maybe
// empty). Main then runs the command with those words and a completer
// set: the command's dispatch (Subcommands) prints the subcommands
// that start with the word when it is the first, its flag parsing
// (ParseFlags, CompleteFlags) the flags that do when it starts with
// "-", and the process exits. Printing nothing leaves the shell to
// complete file names.

// completer is set while the command runs as its own completer.
var completer *struct {
	word string
	w    io.Writer
}

// exit ends a completion run (a variable: tests replace it).
var exit = os.Exit

// Subcommands is called by a command with subcommands before it
// dispatches on args[0]: when it runs as a completer and args[0] is the
// word being completed, it prints the names that start with it and ends
// the run.
func Subcommands(args []string, names ...string) {
	if completer == nil || len(args) > 1 {
		return
	}
	for _, n := range names {
		if strings.HasPrefix(n, completer.word) {
			fmt.Fprintln(completer.w, n)
		}
	}
	exit(ExitOK)
}

// CompleteFlags is called before fs parses its arguments (ParseFlags
// does): when the command runs as a completer, it prints fs's flags that
// start with the word being completed, if that is a flag, and ends the
// run.
func CompleteFlags(fs *pflag.FlagSet) {
	if completer == nil {
		return
	}
	if w := completer.word; strings.HasPrefix(w, "-") {
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden {
				return
			}
			if long := "--" + f.Name; strings.HasPrefix(long, w) {
				fmt.Fprintln(completer.w, long)
			}
		})
		if strings.HasPrefix("--help", w) {
			fmt.Fprintln(completer.w, "--help")
		}
	}
	exit(ExitOK)
}

// completionScript is the script `NAME --completion SHELL` prints.
func completionScript(name, shell string) (string, error) {
	switch shell {
	case "bash":
		return fmt.Sprintf(`# bash completion for %[1]s: source this, or put it in
# ~/.local/share/bash-completion/completions/%[1]s
_stint_%[1]s() {
	local IFS=$'\n'
	COMPREPLY=($(%[1]s __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _stint_%[1]s %[1]s
`, name), nil
	case "zsh":
		return fmt.Sprintf(`#compdef %[1]s
# zsh completion for %[1]s: put it in a directory of $fpath as _%[1]s
_%[1]s() {
	local -a c
	c=("${(@f)$(%[1]s __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	if (( ${#c} )) && [[ -n ${c[1]} ]]; then
		compadd -a c
	else
		_files
	fi
}
compdef _%[1]s %[1]s
`, name), nil
	case "fish":
		return fmt.Sprintf(`# fish completion for %[1]s: put it in ~/.config/fish/completions/%[1]s.fish
complete -c %[1]s -a '(%[1]s __complete (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)'
`, name), nil
	}
	return "", Usagef("--completion: unknown shell %q (want bash, zsh or fish)", shell)
}

// completionArg returns SHELL of a leading `--completion SHELL` (or
// --completion=SHELL), and whether there is one.
func completionArg(args []string) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	if sh, ok := strings.CutPrefix(args[0], "--completion="); ok {
		return sh, true
	}
	if args[0] == "--completion" {
		if len(args) > 1 {
			return args[1], true
		}
		return "", true
	}
	return "", false
}
