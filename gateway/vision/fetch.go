package vision

// Guarded fetching of http(s) image URLs (gateway.image_urls). A client
// names the URL, so without a guard the gateway is a proxy into its own
// network: loopback services, the private LAN, the cloud metadata
// endpoint. The address actually connected to is checked at connect time
// (net.Dialer.Control sees the resolved IP, so DNS rebinding and
// redirects gain nothing), on every connection a redirect opens.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// blockedPrefixes are refused as image URL destinations unless allowed by
// gateway.image_url_allow.
var blockedPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
		"100.64.0.0/10",  // CGNAT
		"169.254.0.0/16", // link-local, with 169.254.169.254 (metadata)
		"192.0.0.0/24",   // IETF protocol assignments
		"198.18.0.0/15",  // benchmarking
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, with 255.255.255.255
		"::/128", "::1/128",
		"fc00::/7",       // unique local, with fd00:ec2::254 (metadata)
		"fe80::/10",      // link-local
		"ff00::/8",       // multicast
		"64:ff9b:1::/48", // local-use NAT64
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// errImageAddress is what the dialer returns for a refused destination.
var errImageAddress = errors.New("image URL destination is not a public address")

// urlGuard decides which destinations image fetches may reach.
type urlGuard struct {
	hosts    map[string]bool
	prefixes []netip.Prefix
}

func newURLGuard(allow []string) urlGuard {
	g := urlGuard{hosts: map[string]bool{}}
	for _, e := range allow {
		e = strings.TrimSpace(e)
		if p, err := netip.ParsePrefix(e); err == nil {
			g.prefixes = append(g.prefixes, p.Masked())
		} else if a, err := netip.ParseAddr(e); err == nil {
			g.prefixes = append(g.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		} else if e != "" {
			g.hosts[strings.ToLower(strings.TrimSuffix(e, "."))] = true
		}
	}
	return g
}

// allowedAddr reports whether a resolved address may be connected to.
func (g urlGuard) allowedAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range g.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// client is an HTTP client whose every connection goes through the guard.
func (g urlGuard) client(timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		hostOK := g.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]
		d := net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
			if hostOK {
				return nil
			}
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !g.allowedAddr(ap.Addr()) {
				return errImageAddress
			}
			return nil
		}}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{
		Transport: &http.Transport{Proxy: nil, DialContext: dial, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second,
			ResponseHeaderTimeout: timeout, TLSHandshakeTimeout: timeout},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect to a %s URL", req.URL.Scheme)
			}
			return nil
		},
	}
}

// fetchFailure is the one text every failed http(s) image fetch gets:
// refused address, closed port, timeout, HTTP error and non-image bodies
// read the same, so the API is no port scanner of the gateway's network.
func fetchFailure(k int) string {
	return fmt.Sprintf("image %d: the image URL could not be fetched as a PNG, JPEG or WebP image (the URL must be public, answer 200 within the time limit and stay under the size limit); send it as a data: URL instead", k)
}

// fetchClient is the intake's HTTP client: Client when set (tests,
// embedding), else one guarded client built on first use.
func (in *Intake) fetchClient() *http.Client {
	if in.Client != nil {
		return in.Client
	}
	in.clientOnce.Do(func() {
		to := in.URL.Timeout
		if to <= 0 {
			to = 10 * time.Second
		}
		in.guarded = newURLGuard(in.URLAllow).client(to)
	})
	return in.guarded
}
