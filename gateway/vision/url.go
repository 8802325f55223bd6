package vision

// Image URL intake: OpenAI's image_url, a data: URL or (only where the
// profile allows, gateway.image_urls) an http(s) URL fetched through the
// address guard (fetch.go).

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// URLLimits bound image URL intake before decoding.
type URLLimits struct {
	MaxBytes int64         // decoded image size (0: DefaultLimits.MaxBytes)
	Timeout  time.Duration // whole http(s) fetch (0: 10 s)
}

func (l URLLimits) maxBytes() int64 {
	if l.MaxBytes > 0 {
		return l.MaxBytes
	}
	return int64(DefaultLimits.MaxBytes)
}

func (l URLLimits) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout
	}
	return 10 * time.Second
}

// ErrImageURLsDisabled is wrapped when an http(s) image arrives while the
// gateway does not fetch remote images.
var ErrImageURLsDisabled = errors.New("http(s) image URLs are disabled on this gateway; send the image as a data: URL")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadImage}, args...)...)
}

// ParseImageURL returns the raw bytes of an OpenAI image_url: a data: URL
// (base64 PNG, JPEG or WebP) or, only when allowHTTP, an http(s) URL fetched
// with client (nil: a client without proxy) within lim and ctx (the client
// request's context). Every error about the image or its URL wraps
// ErrBadImage and names the problem, so the front end answers 400.
func ParseImageURL(ctx context.Context, url string, lim URLLimits, allowHTTP bool, client *http.Client) ([]byte, error) {
	scheme, rest, ok := strings.Cut(url, ":")
	if !ok {
		if url == "" {
			return nil, bad("empty image_url")
		}
		return nil, bad("image_url has no scheme (want data: or http(s):)")
	}
	switch strings.ToLower(scheme) {
	case "data":
		return parseDataURL(rest, lim.maxBytes())
	case "http", "https":
		if !allowHTTP {
			return nil, fmt.Errorf("%w: %w", ErrBadImage, ErrImageURLsDisabled)
		}
		return fetchImage(ctx, url, lim, client)
	}
	return nil, bad("image_url scheme %q is not supported (data: or http(s):)", scheme)
}

// parseDataURL reads what follows "data:".
func parseDataURL(rest string, max int64) ([]byte, error) {
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, bad("data: URL has no comma before its payload")
	}
	parts := strings.Split(meta, ";")
	mime := strings.ToLower(strings.TrimSpace(parts[0]))
	isB64 := false
	for _, p := range parts[1:] {
		if strings.EqualFold(strings.TrimSpace(p), "base64") {
			isB64 = true
		}
	}
	if !isB64 {
		return nil, bad("data: URL is not base64 (want data:image/png;base64,...)")
	}
	if mime != "" && !supportedMIME(mime) {
		return nil, bad("data: URL media type %q is not supported (image/png, image/jpeg, image/webp)", mime)
	}
	// Size check before decoding: base64 inflates by 4/3.
	if int64(len(payload))/4*3 > max+3 {
		return nil, bad("image of about %d bytes is over the %d-byte limit", int64(len(payload))/4*3, max)
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimRight(payload, "\r\n"))
	if err != nil {
		// Some clients send unpadded or URL-safe base64.
		if b2, err2 := base64.RawStdEncoding.DecodeString(strings.TrimRight(payload, "=")); err2 == nil {
			b, err = b2, nil
		} else if b3, err3 := base64.URLEncoding.DecodeString(payload); err3 == nil {
			b, err = b3, nil
		}
	}
	if err != nil {
		return nil, bad("data: URL payload is not valid base64: %v", err)
	}
	if int64(len(b)) > max {
		return nil, bad("image of %d bytes is over the %d-byte limit", len(b), max)
	}
	return b, checkMagic(b, mime)
}

func supportedMIME(m string) bool {
	switch m {
	case "image/png", "image/jpeg", "image/jpg", "image/webp":
		return true
	}
	return false
}

// sniff names the format from the first bytes ("" if none we decode).
func sniff(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png"
	case bytes.HasPrefix(b, []byte{0xff, 0xd8, 0xff}):
		return "jpeg"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "webp"
	}
	return ""
}

func checkMagic(b []byte, mime string) error {
	if len(b) == 0 {
		return bad("image is empty")
	}
	f := sniff(b)
	if f == "" {
		return bad("image is not PNG, JPEG or WebP")
	}
	if mime != "" && !strings.Contains(mime, f) && !(f == "jpeg" && mime == "image/jpg") {
		return bad("data: URL says %s but the bytes are %s", mime, f)
	}
	return nil
}

var noProxyClient = &http.Client{Transport: &http.Transport{Proxy: nil}}

func fetchImage(ctx context.Context, url string, lim URLLimits, client *http.Client) ([]byte, error) {
	if client == nil {
		client = noProxyClient
	}
	ctx, cancel := context.WithTimeout(ctx, lim.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, bad("image URL is invalid: %v", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, bad("fetching the image took longer than %s", lim.timeout())
		}
		return nil, bad("fetch image: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, bad("fetch image: the server answered %s", resp.Status)
	}
	max := lim.maxBytes()
	if resp.ContentLength > max {
		return nil, bad("image of %d bytes is over the %d-byte limit", resp.ContentLength, max)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, bad("fetching the image took longer than %s", lim.timeout())
		}
		return nil, bad("read image: %v", err)
	}
	if int64(len(b)) > max {
		return nil, bad("image is over the %d-byte limit", max)
	}
	ct := strings.ToLower(strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0]))
	if !supportedMIME(ct) {
		ct = "" // servers mislabel images often; trust the bytes
	}
	return b, checkMagic(b, ct)
}
