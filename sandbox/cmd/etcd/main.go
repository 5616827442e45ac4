// Command etcd is the upstream etcd server, built from its Go module.
//
// `go install go.etcd.io/etcd/server/v3@...` does not work because the etcd
// server module carries replace directives, so the sandbox builds this
// three-line wrapper instead. It behaves exactly like the upstream binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
