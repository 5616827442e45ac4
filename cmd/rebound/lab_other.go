//go:build !linux

package main

import "github.com/spf13/cobra"

// labCommands: the sandbox and the demo need Linux (see lab_linux.go);
// elsewhere rebound is the operator CLI only.
func labCommands() []*cobra.Command { return nil }
