package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/vision"
)

// Vision enables image content parts in chat (EPD): the model's
// preprocessor and vision tokens, and the limits on what clients send.
type Vision struct {
	Config vision.Config
	Tokens epd.VisionTokens
	// Decode bounds decoding (zero: vision.DefaultLimits).
	Decode vision.Limits
	// URL bounds image_url intake: bytes, and the http(s) fetch time.
	URL epd.Limits
	// AllowHTTP fetches http(s) image URLs; off, only data: URLs are taken.
	AllowHTTP bool
	// URLAllow lists hosts, IPs and CIDR prefixes that image URLs may
	// reach although loopback, private, link-local, CGNAT, multicast,
	// unspecified or metadata addresses are refused (gateway.image_url_allow).
	URLAllow []string
	// Client fetches http(s) images; nil: a proxy-less client that
	// refuses non-public destinations at connect time (imagefetch.go).
	Client *http.Client

	clientOnce sync.Once
	guarded    *http.Client
}

// LoadVision reads a model directory's preprocessor_config.json and
// vision token ids. A directory without preprocessor_config.json is a
// text-only model: nil, nil.
func LoadVision(modelDir string) (*Vision, error) {
	if _, err := os.Stat(filepath.Join(modelDir, "preprocessor_config.json")); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	cfg, err := vision.LoadConfig(modelDir)
	if err != nil {
		return nil, fmt.Errorf("load vision preprocessor: %w", err)
	}
	vt, err := epd.LoadVisionTokens(modelDir)
	if err != nil {
		return nil, fmt.Errorf("load vision tokens: %w", err)
	}
	return &Vision{Config: cfg, Tokens: vt, Decode: vision.DefaultLimits}, nil
}

func isImagePart(t string) bool {
	return t == "image_url" || t == "input_image" || t == "image"
}

// messageContent is one message's content for the template: text parts
// flattened to a string (flattenContent) when there is no image, else the
// parts in order with each image reduced to {"type": "image_url"} (the
// template renders one vision anchor per image part; the pixels never
// reach it). It returns the images' URLs in order.
func messageContent(raw json.RawMessage, i int) (json.RawMessage, []string, *apiError) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '[' {
		c, e := flattenContent(raw, i)
		return c, nil, e
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     *string         `json:"text"`
		ImageURL json.RawMessage `json:"image_url"`
		Image    json.RawMessage `json:"image"`
	}
	if err := json.Unmarshal(trimmed, &parts); err != nil {
		c, e := flattenContent(raw, i)
		return c, nil, e
	}
	hasImage := false
	for _, p := range parts {
		hasImage = hasImage || isImagePart(p.Type)
	}
	if !hasImage {
		c, e := flattenContent(raw, i)
		return c, nil, e
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text,omitempty"`
	}
	var out []part
	var urls []string
	for j, p := range parts {
		param := fmt.Sprintf("messages[%d].content[%d]", i, j)
		switch {
		case p.Type == "text" || p.Type == "input_text":
			if p.Text != nil {
				out = append(out, part{Type: "text", Text: *p.Text})
			}
		case isImagePart(p.Type):
			u, ok := imageURLOf(p.ImageURL)
			if !ok {
				u, ok = imageURLOf(p.Image)
			}
			if !ok {
				return nil, nil, badRequest(param, "an image part needs image_url.url (a data: URL or an http(s) URL)")
			}
			urls = append(urls, u)
			out = append(out, part{Type: "image_url"})
		default:
			return nil, nil, badRequest(param, fmt.Sprintf("content part type %q is not supported", p.Type))
		}
	}
	b, _ := json.Marshal(out)
	return b, urls, nil
}

// imageURLOf accepts {"url": "..."} (OpenAI) or a bare string.
func imageURLOf(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != ""
	}
	var o struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.URL, o.URL != ""
	}
	return "", false
}

// checkImageSupport refuses images before any byte is fetched or decoded
// when the model or the deployment takes none.
func (s *Server) checkImageSupport() *apiError {
	if s.opts.Vision == nil {
		return errorf(http.StatusBadRequest, "multimodal_not_supported", "messages", "this model takes no images (its directory has no preprocessor_config.json)")
	}
	if err := s.engine.ImageSupport(); err != nil {
		return engineError(err, http.StatusBadRequest, "multimodal_not_supported", "")
	}
	return nil
}

// prepareImages fetches or decodes each image, preprocesses it for the
// model and expands the prompt's anchors; every problem with an image is a
// 400 naming it, and nothing reaches an engine.
func (s *Server) prepareImages(ctx context.Context, ids []int32, urls []string) ([]int32, []gen.Image, *apiError) {
	if len(urls) == 0 {
		return ids, nil, nil
	}
	if e := s.checkImageSupport(); e != nil {
		return nil, nil, e
	}
	v := s.opts.Vision
	raws := make([][]byte, len(urls))
	for k, u := range urls {
		remote := v.AllowHTTP && isRemoteURL(u)
		var client *http.Client
		if remote {
			client = v.fetchClient()
		}
		b, err := epd.ParseImageURLContext(ctx, u, v.URL, v.AllowHTTP, client)
		if err != nil {
			if remote {
				return nil, nil, errorf(http.StatusBadRequest, "invalid_image", "messages", imageFetchError(k))
			}
			return nil, nil, errorf(http.StatusBadRequest, "invalid_image", "messages", fmt.Sprintf("image %d: %v", k, err))
		}
		raws[k] = b
	}
	lim := v.Decode
	if lim == (vision.Limits{}) {
		lim = vision.DefaultLimits
	}
	out, imgs, err := epd.PrepareGen(ids, raws, v.Config, v.Tokens, lim)
	switch {
	case errors.Is(err, epd.ErrPlaceholders):
		return nil, nil, errorf(http.StatusBadRequest, "multimodal_prompt_contract_mismatch", "messages", err.Error())
	case errors.Is(err, vision.ErrBadImage):
		return nil, nil, errorf(http.StatusBadRequest, "invalid_image", "messages", err.Error())
	case err != nil:
		return nil, nil, errorf(http.StatusBadRequest, "invalid_image", "messages", "prepare images: "+err.Error())
	}
	return out, imgs, nil
}
