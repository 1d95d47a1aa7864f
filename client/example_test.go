package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/weirlimit/weir/client"
)

// A gateway: the SDK checks every request with the cluster and answers
// 429 (with Retry-After and RateLimit headers) itself; allowed requests
// reach the handler.
func Example() {
	cfg := client.DefaultConfig()
	cfg.Cluster = []string{"10.0.0.1:9090", "10.0.0.2:9090"} // any nodes' gRPC addresses
	cfg.GatewayID = "edge-1"
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		log.Fatal(err) // says why: a refused connection, a certificate, ...
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	log.Fatal(http.ListenAndServe(":8000", cl.Middleware()(api)))
}

// A cluster with mutual TLS: the files `weir tls cert create --gateway
// edge-1` writes.
func ExampleTLSFromFiles() {
	tc, err := client.TLSFromFiles("tls/ca.pem", "tls/gateway-edge-1.pem", "tls/gateway-edge-1-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	cfg := client.DefaultConfig()
	cfg.Cluster = []string{"n1:9090"}
	cfg.GatewayID = "edge-1"
	cfg.TLS = tc
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
}

// Asking about a key directly, outside HTTP: a job spending a partner's
// quota under the rule "exports.daily".
func ExampleClient_CheckKey() {
	var cl *client.Client // from client.New
	d, err := cl.CheckKey(context.Background(), "apikey:ak_partner", 1, "exports.daily")
	if err != nil {
		log.Fatal(err) // ErrNotReady, ErrUnknownRule, ErrInvalidCheck
	}
	if !d.Allowed {
		fmt.Printf("over the limit; retry in %s\n", d.RetryAfter)
	}
}

// A Config is checked before anything starts; the error names the field.
func ExampleConfig_Validate() {
	cfg := client.DefaultConfig()
	fmt.Println(cfg.Validate())
	// Output: client: invalid config: Cluster: at least one node gRPC address is required
}
