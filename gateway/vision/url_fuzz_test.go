package vision

import (
	"errors"
	"testing"
)

// Whatever a client puts in image_url, ParseImageURL either returns bytes
// that start like a PNG, JPEG or WebP within the limit, or an error that
// wraps ErrBadImage (a 400, never a 500 or a panic).
func FuzzParseImageURL(f *testing.F) {
	for _, s := range []string{
		"data:image/png;base64,iVBORw0KGgo=", "data:image/jpeg;base64,/9j/4AAQ", "data:image/webp;base64,UklGRhAAAABXRUJQ",
		"data:,", "data:image/png;base64", "data:;base64,====", "http://x", "", "DATA:IMAGE/PNG;BASE64,iVBORw0KGgo",
		"data:image/png;charset=utf-8;base64,iVBORw0KGgoAAAAN",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, url string) {
		b, err := ParseImageURL(t.Context(), url, URLLimits{MaxBytes: 4096}, false, nil)
		if err != nil {
			if !errors.Is(err, ErrBadImage) {
				t.Fatalf("error %v does not wrap ErrBadImage", err)
			}
			return
		}
		if len(b) > 4096 || sniff(b) == "" {
			t.Fatalf("accepted %d bytes of format %q", len(b), sniff(b))
		}
	})
}
