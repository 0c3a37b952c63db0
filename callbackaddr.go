package redrive

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrCallbackAddress is the error of a callback whose host is an address
// that callbacks may not reach (see DelivererConfig.CallbackAllowPrivate).
// A notification that meets it is dead at once.
var ErrCallbackAddress = errors.New("callback address not allowed")

// cgnat is the shared address space of carrier-grade NAT (RFC 6598), which
// netip does not count as private but which is not the public internet
// either.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// publicAddr reports whether ip is an address on the public internet: not
// loopback, private, link-local, multicast, unspecified or shared.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !ip.IsLoopback() && !ip.IsPrivate() && !ip.IsLinkLocalUnicast() &&
		!ip.IsLinkLocalMulticast() && !ip.IsInterfaceLocalMulticast() && !ip.IsMulticast() &&
		!ip.IsUnspecified() && !cgnat.Contains(ip)
}

// refuseNonPublic is a net.Dialer's Control: it runs on the address the
// connection is about to reach, after name resolution, so a host name that
// resolves (or rebinds) to an internal address is refused as well.
func refuseNonPublic(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrCallbackAddress, address)
	}
	if !publicAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s is not a public address (DelivererConfig.CallbackAllowPrivate, serve --callback-allow-private)", ErrCallbackAddress, ap.Addr())
	}
	return nil
}

// callbackClient is the default client of item callbacks: like the
// webhooks' client, it follows no redirect, and unless allowPrivate it
// connects only to public addresses, without a proxy (a proxy would
// connect on its behalf and bypass the check).
func callbackClient(timeout time.Duration, allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = refuseNonPublic
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if allowPrivate {
		t.Proxy = http.ProxyFromEnvironment
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
