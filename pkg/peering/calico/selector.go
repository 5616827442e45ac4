package calico

import (
	"fmt"
	"strings"
)

// Selects reports whether a Calico selector (BGPPeer spec.nodeSelector and
// spec.peerSelector) selects a node with these labels, with calico-node's
// semantics, so that tests and tools can tell which nodes a BGPPeer read
// back from the API meshes without running calico-node.
//
// It covers the part of Calico's selector language that selects on one
// label: all(), has(k), k == 'v', k != 'v', k in {'a', 'b'},
// k not in {'a'}, !, &&, || and parentheses, with Calico's precedence
// (! over && over ||). As in libcalico-go's parser, k != 'v' and
// k not in {...} also match a node that has no label k; every other test
// of a label needs the label. Anything else (contains, starts with,
// global(), ...) is an error, never a guess.
func Selects(selector string, labels map[string]string) (bool, error) {
	p := &selParser{in: selector}
	if strings.TrimSpace(selector) == "" {
		// Calico treats an empty selector as all().
		return true, nil
	}
	n, err := p.or()
	if err == nil {
		p.skipSpace()
		if p.pos < len(p.in) {
			err = p.errorf("unexpected %q", p.in[p.pos:])
		}
	}
	if err != nil {
		return false, fmt.Errorf("calico selector %q: %w", selector, err)
	}
	return n(labels), nil
}

// selNode is a parsed selector: a predicate on labels.
type selNode func(map[string]string) bool

type selParser struct {
	in  string
	pos int
}

func (p *selParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *selParser) skipSpace() {
	for p.pos < len(p.in) && (p.in[p.pos] == ' ' || p.in[p.pos] == '\t') {
		p.pos++
	}
}

// eat consumes tok (after spaces) and reports whether it was there.
func (p *selParser) eat(tok string) bool {
	p.skipSpace()
	if strings.HasPrefix(p.in[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func (p *selParser) or() (selNode, error) {
	left, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.eat("||") {
		right, err := p.and()
		if err != nil {
			return nil, err
		}
		l := left
		left = func(m map[string]string) bool { return l(m) || right(m) }
	}
	return left, nil
}

func (p *selParser) and() (selNode, error) {
	left, err := p.unary()
	if err != nil {
		return nil, err
	}
	for p.eat("&&") {
		right, err := p.unary()
		if err != nil {
			return nil, err
		}
		l := left
		left = func(m map[string]string) bool { return l(m) && right(m) }
	}
	return left, nil
}

func (p *selParser) unary() (selNode, error) {
	p.skipSpace()
	if strings.HasPrefix(p.in[p.pos:], "!") && !strings.HasPrefix(p.in[p.pos:], "!=") {
		p.pos++
		n, err := p.unary()
		if err != nil {
			return nil, err
		}
		return func(m map[string]string) bool { return !n(m) }, nil
	}
	return p.primary()
}

func (p *selParser) primary() (selNode, error) {
	switch {
	case p.eat("("):
		n, err := p.or()
		if err != nil {
			return nil, err
		}
		if !p.eat(")") {
			return nil, p.errorf("want ')'")
		}
		return n, nil
	case p.eat("all()"):
		return func(map[string]string) bool { return true }, nil
	case p.eat("has("):
		p.skipSpace()
		k := p.label()
		if k == "" {
			return nil, p.errorf("want a label name in has()")
		}
		if !p.eat(")") {
			return nil, p.errorf("want ')' after has(%s", k)
		}
		return func(m map[string]string) bool { _, ok := m[k]; return ok }, nil
	}
	p.skipSpace()
	k := p.label()
	if k == "" {
		return nil, p.errorf("want a label name, all() or has()")
	}
	switch {
	case p.eat("=="):
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		return func(m map[string]string) bool { got, ok := m[k]; return ok && got == v }, nil
	case p.eat("!="):
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		return func(m map[string]string) bool { got, ok := m[k]; return !ok || got != v }, nil
	case p.eat("not"):
		if !p.eat("in") {
			return nil, p.errorf("want 'in' after 'not'")
		}
		set, err := p.set()
		if err != nil {
			return nil, err
		}
		return func(m map[string]string) bool { got, ok := m[k]; return !ok || !set[got] }, nil
	case p.eat("in"):
		set, err := p.set()
		if err != nil {
			return nil, err
		}
		return func(m map[string]string) bool { got, ok := m[k]; return ok && set[got] }, nil
	}
	return nil, p.errorf("unsupported operator after label %s (want ==, !=, in or not in)", k)
}

// label reads a label key: the characters Calico's tokenizer accepts.
func (p *selParser) label() string {
	start := p.pos
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '/' || c == '-' {
			p.pos++
			continue
		}
		break
	}
	return p.in[start:p.pos]
}

// str reads a quoted string, single or double quotes, no escapes.
func (p *selParser) str() (string, error) {
	p.skipSpace()
	if p.pos >= len(p.in) || (p.in[p.pos] != '\'' && p.in[p.pos] != '"') {
		return "", p.errorf("want a quoted value")
	}
	q := p.in[p.pos]
	end := strings.IndexByte(p.in[p.pos+1:], q)
	if end < 0 {
		return "", p.errorf("unterminated string")
	}
	v := p.in[p.pos+1 : p.pos+1+end]
	p.pos += end + 2
	return v, nil
}

// set reads {'a', 'b'}.
func (p *selParser) set() (map[string]bool, error) {
	if !p.eat("{") {
		return nil, p.errorf("want '{'")
	}
	out := map[string]bool{}
	if p.eat("}") {
		return out, nil
	}
	for {
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		out[v] = true
		if p.eat("}") {
			return out, nil
		}
		if !p.eat(",") {
			return nil, p.errorf("want ',' or '}'")
		}
	}
}
