// Command referrers-registry serves go-containerregistry's in-memory OCI
// registry with the OCI 1.1 referrers API turned on (crane registry serve
// v0.22 leaves it off), on a loopback address given as the only argument:
//
//	referrers-registry 127.0.0.1:5000
//
// tkm's e2e tests use it beside Debian's registry 2.8, which has no referrers
// API, so that both of cosign v3's ways of attaching bundles are exercised.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: referrers-registry 127.0.0.1:PORT")
		os.Exit(2)
	}
	host, _, err := net.SplitHostPort(os.Args[1])
	if err != nil || !net.ParseIP(host).IsLoopback() {
		fmt.Fprintln(os.Stderr, "referrers-registry: the address must be a loopback IP:PORT")
		os.Exit(2)
	}
	l, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("serving on %s\n", l.Addr())
	s := &http.Server{
		Handler:           registry.New(registry.WithReferrersSupport(true)),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Fatal(s.Serve(l))
}
