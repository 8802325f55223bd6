package vision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// Intake is a vision model's image intake, the one home of it: image
// URLs in (data:, or http(s) through the address guard where allowed),
// the decoded, preprocessed images and the expanded prompt out, as the
// tokenapi.Images a front end hands the dispatcher. It holds the model's
// preprocessor and anchor tokens and the limits on what clients send.
type Intake struct {
	Config Config
	Tokens Tokens
	// Decode bounds decoding (zero: DefaultLimits).
	Decode Limits
	// URL bounds image_url intake: bytes, and the http(s) fetch time.
	URL URLLimits
	// AllowHTTP fetches http(s) image URLs; off, only data: URLs are taken.
	AllowHTTP bool
	// URLAllow lists hosts, IPs and CIDR prefixes that image URLs may
	// reach although loopback, private, link-local, CGNAT, multicast,
	// unspecified or metadata addresses are refused (gateway.image_url_allow).
	URLAllow []string
	// Client fetches http(s) images; nil: a proxy-less client that
	// refuses non-public destinations at connect time (fetch.go).
	Client *http.Client

	clientOnce sync.Once
	guarded    *http.Client
}

// Load reads a model directory's preprocessor_config.json and vision
// token ids. A directory without preprocessor_config.json is a text-only
// model: nil, nil.
func Load(modelDir string) (*Intake, error) {
	if _, err := os.Stat(filepath.Join(modelDir, "preprocessor_config.json")); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	cfg, err := LoadConfig(modelDir)
	if err != nil {
		return nil, fmt.Errorf("load vision preprocessor: %w", err)
	}
	vt, err := LoadTokens(modelDir)
	if err != nil {
		return nil, fmt.Errorf("load vision tokens: %w", err)
	}
	return &Intake{Config: cfg, Tokens: vt, Decode: DefaultLimits}, nil
}

// fetchError is a failed http(s) image fetch as the client is told it:
// one text for every cause (fetchFailure), so the API is no port scanner
// of the gateway's network. It is a bad image (ErrBadImage).
type fetchError struct{ image int }

func (e fetchError) Error() string        { return fetchFailure(e.image) }
func (e fetchError) Is(target error) bool { return target == ErrBadImage }

// Images fetches or decodes each of a prompt's image URLs (in prompt
// order), preprocesses them for the model and expands the prompt's
// anchors. Every problem with an image wraps ErrBadImage and names the
// image; anchors that do not match the images wrap ErrPlaceholders.
func (in *Intake) Images(ctx context.Context, ids []int32, urls []string) ([]int32, []tokenapi.Image, error) {
	if len(urls) == 0 {
		return ids, nil, nil
	}
	raws := make([][]byte, len(urls))
	for k, u := range urls {
		remote := in.AllowHTTP && isRemoteURL(u)
		var client *http.Client
		if remote {
			client = in.fetchClient()
		}
		b, err := ParseImageURL(ctx, u, in.URL, in.AllowHTTP, client)
		if err != nil {
			if remote {
				return nil, nil, fetchError{k}
			}
			return nil, nil, fmt.Errorf("image %d: %w", k, err)
		}
		raws[k] = b
	}
	lim := in.Decode
	if lim == (Limits{}) {
		lim = DefaultLimits
	}
	return Prepare(ids, raws, in.Config, in.Tokens, lim)
}

// isRemoteURL reports an http(s) URL (anything else is a data: URL or
// refused before any fetch).
func isRemoteURL(u string) bool {
	l := strings.ToLower(strings.TrimSpace(u))
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://")
}
