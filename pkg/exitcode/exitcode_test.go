package exitcode

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	inner := errors.New("boom")
	for _, tc := range []struct {
		err  error
		want int
		msg  string
	}{
		{nil, 0, ""},
		{inner, 7, "boom"},
		{&Error{Code: 2, Err: inner}, 2, "boom"},
		{fmt.Errorf("wrapped: %w", &Error{Code: 3, Msg: "say this", Err: inner}), 3, "wrapped: say this"},
		{Usage(inner), BadInput, "boom"},
	} {
		if got := Of(tc.err, 7); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
		if tc.err != nil && tc.err.Error() != tc.msg {
			t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
		}
	}
	if Usage(nil) != nil {
		t.Error("Usage(nil) is not nil")
	}
}

// TestReport: one line, printed once, and the code of the error or the
// binary's fallback.
func TestReport(t *testing.T) {
	for _, tc := range []struct {
		err      error
		fallback int
		want     int
		out      string
	}{
		{nil, Failed, OK, ""},
		{errors.New("boom\n"), Failed, Failed, "Error: boom\n"},
		{fmt.Errorf("restore bringup: %w", &Error{Code: 4, Msg: "refused as unsafe"}), Failed, 4, "Error: restore bringup: refused as unsafe\n"},
		{errors.New(`unknown command "x"`), BadInput, BadInput, "Error: unknown command \"x\"\n"},
	} {
		var w bytes.Buffer
		if got := Report(&w, "Error: ", tc.err, tc.fallback); got != tc.want {
			t.Errorf("Report(%v) = %d, want %d", tc.err, got, tc.want)
		}
		if w.String() != tc.out {
			t.Errorf("Report(%v) printed %q, want %q", tc.err, w.String(), tc.out)
		}
	}
}
