package exitcode

import (
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
	} {
		if got := Of(tc.err, 7); got != tc.want {
			t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
		}
		if tc.err != nil && tc.err.Error() != tc.msg {
			t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
		}
	}
}
