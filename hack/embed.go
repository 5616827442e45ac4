// Package hack embeds the install scripts CI and developers run, so that
// `rebound demo` installs what it needs exactly as `make test` does, even
// from a binary built outside a checkout.
package hack

import _ "embed"

// InstallBird is hack/install-bird.sh: BIRD 1.6 and BIRD 2 from Debian,
// as root.
//
//go:embed install-bird.sh
var InstallBird []byte
