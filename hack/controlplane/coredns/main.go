// CoreDNS as upstream builds it (coremain), with only the plugins the real node's
// Corefile uses (hack/controlplane/node.sh writes it) compiled in: CoreDNS's own
// way of choosing plugins at build time (its plugin.cfg produces these same two
// lists). The full set links the AWS, Azure and Google Cloud SDKs and their
// dependencies, half of the node's cold build. Not product code.
//
// A plugin added to the Corefile must be added here, in both places, in the order
// of upstream's core/dnsserver/zdirectives.go (the order requests pass through).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"
)

func init() {
	dnsserver.Directives = []string{"reload", "bind", "errors", "cache", "template", "kubernetes"}
}

func main() {
	coremain.Run()
}
