package cli

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/spf13/cobra"

	"rebound/pkg/exitcode"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		runErr   error
		wantCode int
		wantErr  string
	}{
		{name: "success", wantCode: exitcode.OK},
		{name: "an error with a code", runErr: &exitcode.Error{Code: 3, Err: errors.New("timed out")}, wantCode: 3, wantErr: "Error: timed out\n"},
		{name: "an error without one takes the fallback", runErr: errors.New("boom"), wantCode: exitcode.Failed, wantErr: "Error: boom\n"},
		{name: "a bad flag is bad input", args: []string{"--no-such-flag"}, wantCode: exitcode.BadInput, wantErr: "Error: unknown flag: --no-such-flag\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := &cobra.Command{
				Use: "x", SilenceUsage: true, SilenceErrors: true,
				RunE: func(*cobra.Command, []string) error { return tc.runErr },
			}
			root.SetFlagErrorFunc(BadFlag)
			root.SetArgs(tc.args)
			var stderr bytes.Buffer
			if got := Run(context.Background(), root, &stderr, "Error: ", exitcode.Failed); got != tc.wantCode {
				t.Errorf("exit code %d, want %d", got, tc.wantCode)
			}
			if stderr.String() != tc.wantErr {
				t.Errorf("stderr %q, want %q (the error once, on one line)", stderr.String(), tc.wantErr)
			}
		})
	}
}
