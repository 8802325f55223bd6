package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/vision"
)

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
			if p.Text == nil {
				return nil, nil, missingText(i, j)
			}
			out = append(out, part{Type: "text", Text: *p.Text})
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
		return front.AsOr(err, http.StatusBadRequest, "multimodal_not_supported", "")
	}
	return nil
}

// prepareImages hands the images to the model's intake (gateway/vision:
// fetch or decode, preprocess, expand the prompt's anchors); every
// problem with an image is a 400 naming it, and nothing reaches an
// engine.
func (s *Server) prepareImages(ctx context.Context, ids []int32, urls []string) ([]int32, []tokenapi.Image, *apiError) {
	if len(urls) == 0 {
		return ids, nil, nil
	}
	if e := s.checkImageSupport(); e != nil {
		return nil, nil, e
	}
	out, imgs, err := s.opts.Vision.Images(ctx, ids, urls)
	switch {
	case errors.Is(err, vision.ErrPlaceholders):
		return nil, nil, errorf(http.StatusBadRequest, "multimodal_prompt_contract_mismatch", "messages", err.Error())
	case errors.Is(err, vision.ErrBadImage):
		return nil, nil, errorf(http.StatusBadRequest, "invalid_image", "messages", err.Error())
	case err != nil:
		return nil, nil, errorf(http.StatusBadRequest, "invalid_image", "messages", "prepare images: "+err.Error())
	}
	return out, imgs, nil
}
