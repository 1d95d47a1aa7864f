package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/spf13/pflag"
)

// upstreamOptions tune the connections `weir gateway` keeps to its
// upstream. Go's default transport keeps 2 idle connections per host, so
// under concurrency almost every request dialled anew (and left a socket
// in TIME_WAIT); a proxy keeps as many as it has requests in flight.
type upstreamOptions struct {
	maxIdle       int           // idle connections kept to the upstream
	maxConns      int           // most connections to the upstream (0: no bound)
	idleTimeout   time.Duration // how long an idle connection is kept
	dialTimeout   time.Duration
	headerTimeout time.Duration // how long to wait for the upstream's response headers (0: no bound)
	h2c           bool          // HTTP/2 without TLS (prior knowledge) to an http:// upstream
	flush         time.Duration // ReverseProxy.FlushInterval
}

func defaultUpstreamOptions() upstreamOptions {
	return upstreamOptions{maxIdle: 1024, idleTimeout: 90 * time.Second, dialTimeout: 5 * time.Second, headerTimeout: 60 * time.Second}
}

// flags registers o's flags on fs, with o's values as defaults.
func (o *upstreamOptions) flags(fs *pflag.FlagSet) {
	fs.IntVar(&o.maxIdle, "upstream-idle-conns", o.maxIdle, "idle connections kept open to the upstream for reuse (size it to the requests in flight)")
	fs.IntVar(&o.maxConns, "upstream-max-conns", o.maxConns, "most connections open to the upstream at once; further requests wait (0: no bound)")
	fs.DurationVar(&o.idleTimeout, "upstream-idle-timeout", o.idleTimeout, "how long an idle upstream connection is kept")
	fs.DurationVar(&o.dialTimeout, "upstream-dial-timeout", o.dialTimeout, "bound on connecting to the upstream")
	fs.DurationVar(&o.headerTimeout, "upstream-response-timeout", o.headerTimeout, "bound on waiting for the upstream's response headers (0: none); bodies stream without a bound")
	fs.BoolVar(&o.h2c, "upstream-h2c", o.h2c, "speak HTTP/2 without TLS to an http:// upstream (it must accept prior-knowledge h2c); an https:// upstream gets HTTP/2 when it offers it")
	fs.DurationVar(&o.flush, "flush-interval", o.flush, "how often a streamed response body is flushed to the client (0: as net/http/httputil does, at once for event streams and bodies of unknown length; -1: after every write)")
}

func (o upstreamOptions) validate() error {
	switch {
	case o.maxIdle < 0:
		return fmt.Errorf("--upstream-idle-conns %d: must be ≥ 0", o.maxIdle)
	case o.maxConns < 0:
		return fmt.Errorf("--upstream-max-conns %d: must be ≥ 0", o.maxConns)
	case o.idleTimeout <= 0:
		return fmt.Errorf("--upstream-idle-timeout %s: must be > 0", o.idleTimeout)
	case o.dialTimeout <= 0:
		return fmt.Errorf("--upstream-dial-timeout %s: must be > 0", o.dialTimeout)
	case o.headerTimeout < 0:
		return fmt.Errorf("--upstream-response-timeout %s: must be ≥ 0", o.headerTimeout)
	}
	return nil
}

// transport is the upstream transport o describes.
func (o upstreamOptions) transport(up *url.URL) *http.Transport {
	d := &net.Dialer{Timeout: o.dialTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment, // as before (Go never proxies loopback)
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true, // https: HTTP/2 when the upstream offers it in ALPN
		MaxIdleConns:          o.maxIdle,
		MaxIdleConnsPerHost:   o.maxIdle,
		MaxConnsPerHost:       o.maxConns,
		IdleConnTimeout:       o.idleTimeout,
		TLSHandshakeTimeout:   o.dialTimeout,
		ResponseHeaderTimeout: o.headerTimeout,
		ExpectContinueTimeout: time.Second,
	}
	if o.h2c && up.Scheme == "http" {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
	}
	return tr
}

// upstreamProxy is the reverse proxy to up over o's transport.
func upstreamProxy(up *url.URL, o upstreamOptions, logger *slog.Logger) *httputil.ReverseProxy {
	proxy := httputil.NewSingleHostReverseProxy(up)
	proxy.Transport = o.transport(up)
	proxy.FlushInterval = o.flush
	proxy.BufferPool = copyBuffers
	proxy.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	return proxy
}

// copyBuffers lends the proxy its body copy buffers. Without a pool
// httputil.ReverseProxy allocates (and clears) 32 KiB for every response,
// however short: three quarters of the gateway's allocated bytes and much
// of its garbage collection under load.
var copyBuffers = &bufferPool{}

// bufferPool is an httputil.BufferPool of 32 KiB buffers. It keeps
// pointers, so a Get allocates nothing once buffers are pooled.
type bufferPool struct{ p sync.Pool }

const copyBufferSize = 32 << 10

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, copyBufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) != copyBufferSize {
		return
	}
	buf = buf[:copyBufferSize]
	b.p.Put(&buf)
}
