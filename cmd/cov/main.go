package main

import "github.com/stint-project/stint/internal/cli"

func main() { cli.Main("cov", run) }
