package bird

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"
)

// Client talks to a running BIRD over its control socket, the protocol
// birdc speaks: a welcome line, then one command per line, each answered by
// lines that start with a 4-digit reply code; the last line of a reply has
// a space after the code, the others a dash.
//
// With Birdc set, commands run through that birdc binary instead
// (`birdc -v -s SOCKET COMMAND`, coded output); the result is the same.
// Both work with BIRD 1.6 and BIRD 2.
type Client struct {
	// Socket is the control socket (bird -s), e.g. /var/run/calico/bird.ctl.
	Socket string
	// Birdc, when set, is the birdc binary to run instead of dialling the
	// socket directly.
	Birdc string
	// Timeout bounds one command; 0 means 10 s.
	Timeout time.Duration
}

// UnreachableError says the control socket did not answer: BIRD is not
// running, is starting, or the path is wrong.
type UnreachableError struct {
	Socket string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("BIRD control socket %s does not answer (is BIRD running, and started with -s %s?): %v", e.Socket, e.Socket, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ConfigError is BIRD's refusal of a configuration: the file stays
// unapplied and BIRD keeps running with its previous configuration.
type ConfigError struct {
	// Message is BIRD's complaint, e.g. "/etc/bird/mesh.conf:3:55 syntax error".
	Message string
}

func (e *ConfigError) Error() string { return "BIRD rejected the configuration: " + e.Message }

// Query sends one command and returns the raw coded reply, welcome line
// included. Replies with an error code (8000 and above) are returned as
// text too: use the parsers to interpret them.
func (c Client) Query(ctx context.Context, command string) (string, error) {
	if strings.ContainsAny(command, "\r\n") {
		return "", fmt.Errorf("BIRD command %q: contains a line break", command)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.Birdc != "" {
		return c.queryBirdc(ctx, command)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return "", &UnreachableError{Socket: c.Socket, Err: err}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)
	var reply strings.Builder
	readReply := func() error {
		for {
			line, err := r.ReadString('\n')
			reply.WriteString(line)
			if err != nil {
				return err
			}
			if len(line) >= 5 && line[4] == ' ' && line[0] >= '0' && line[0] <= '9' {
				return nil
			}
		}
	}
	if err := readReply(); err != nil {
		return reply.String(), &UnreachableError{Socket: c.Socket, Err: fmt.Errorf("no welcome line: %w", err)}
	}
	if _, err := fmt.Fprintf(conn, "%s\n", command); err != nil {
		return reply.String(), &UnreachableError{Socket: c.Socket, Err: err}
	}
	if err := readReply(); err != nil {
		return reply.String(), fmt.Errorf("BIRD control socket %s: reading the reply to %q: %w", c.Socket, command, err)
	}
	return reply.String(), nil
}

func (c Client) queryBirdc(ctx context.Context, command string) (string, error) {
	args := append([]string{"-v", "-s", c.Socket}, strings.Fields(command)...)
	out, err := exec.CommandContext(ctx, c.Birdc, args...).CombinedOutput()
	text := string(out)
	if err != nil {
		return text, &UnreachableError{Socket: c.Socket, Err: fmt.Errorf("%s %s: %v: %s", c.Birdc, strings.Join(args, " "), err, strings.TrimSpace(text))}
	}
	// birdc exits 0 when it cannot connect; it says so on its output.
	if strings.Contains(text, "Unable to connect to server") {
		return text, &UnreachableError{Socket: c.Socket, Err: errors.New(strings.TrimSpace(text))}
	}
	return text, nil
}

// Configure makes BIRD re-read the configuration file it was started with
// (`birdc configure`). A configuration BIRD refuses returns a *ConfigError;
// BIRD then keeps its previous configuration.
func (c Client) Configure(ctx context.Context) error {
	out, err := c.Query(ctx, "configure")
	if err != nil {
		return err
	}
	return ParseConfigureReply(out)
}

// Protocols returns the parsed `show protocols`.
func (c Client) Protocols(ctx context.Context) ([]Protocol, error) {
	out, err := c.Query(ctx, "show protocols")
	if err != nil {
		return nil, err
	}
	return ParseShowProtocols(out)
}

// Status returns the parsed `show status`.
func (c Client) Status(ctx context.Context) (Status, error) {
	out, err := c.Query(ctx, "show status")
	if err != nil {
		return Status{}, err
	}
	return ParseShowStatus(out)
}

// Reply codes of `configure` (BIRD's doc/reply_codes).
const (
	codeReadingConfig  = 2  // 0002 Reading configuration from FILE
	codeReconfigured   = 3  // 0003 Reconfigured
	codeInProgress     = 4  // 0004 Reconfiguration in progress
	codeQueued         = 5  // 0005 Reconfiguration already in progress, queueing new config
	codeIgnoredStop    = 6  // 0006 Reconfiguration ignored, shutting down
	codeUnchanged      = 19 // 0019 Nothing to do
	codeConfigOK       = 20 // 0020 Configuration OK (configure check)
	codeUndoScheduled  = 22 // 0022 Undo scheduled
	codeConfirmPending = 24 // 0024 Reconfiguration confirmed / pending
)

// ParseConfigureReply interprets the reply to `configure`: nil when BIRD
// took the configuration (reconfigured, or reconfiguring, or queued), a
// *ConfigError with BIRD's message when it refused it (a parse error,
// reply code 8002, or any other error code), an error when BIRD is
// shutting down or the reply is not one of those.
func ParseConfigureReply(out string) error {
	var last replyLine
	found := false
	for _, l := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		m := codePrefix.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var code int
		fmt.Sscanf(m[1], "%d", &code)
		if code >= 8000 {
			return &ConfigError{Message: strings.TrimSpace(l[5:])}
		}
		last, found = replyLine{code: code, text: strings.TrimSpace(l[5:])}, true
	}
	if !found {
		return fmt.Errorf("unexpected reply to `configure` (no reply code): %.200q", out)
	}
	switch last.code {
	case codeReconfigured, codeInProgress, codeQueued, codeUnchanged, codeConfigOK, codeUndoScheduled, codeConfirmPending:
		return nil
	case codeIgnoredStop:
		return fmt.Errorf("BIRD ignored the reconfiguration: %s", last.text)
	}
	return fmt.Errorf("unexpected reply to `configure`: %04d %s", last.code, last.text)
}

// BFDSessions returns the parsed `show bfd sessions`; BIRD answers with an
// error when no BFD protocol runs.
func (c Client) BFDSessions(ctx context.Context) ([]BFDSession, error) {
	out, err := c.Query(ctx, "show bfd sessions")
	if err != nil {
		return nil, err
	}
	return ParseShowBFDSessions(out)
}
