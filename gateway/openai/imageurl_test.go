package openai

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/vision"
)

func errorMessage(t *testing.T, body []byte) string {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not an error body: %s", body)
	}
	return e.Error.Message
}

// Regression: image_urls fetched loopback and private addresses, followed
// redirects into them, and its error text told open ports from closed.
// httptest servers on 127.0.0.1 stand for the internal services.
func TestImageURLsRefusePrivateAddresses(t *testing.T) {
	t.Parallel()
	png := pngBytes(t, 16, 16)
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cat.png":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write(png)
		case "/text":
			_, _ = w.Write([]byte("internal admin page"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer img.Close()
	// A redirector reached by host name ("localhost" allowed) that points
	// into an address that is not.
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, img.URL+"/cat.png", http.StatusFound)
	}))
	defer redir.Close()
	redirURL := strings.Replace(redir.URL, "127.0.0.1", "localhost", 1) + "/r"

	eng, guarded := vlServerWith(t, nil, func(v *vision.Intake) { v.AllowHTTP = true })
	resp, body := post(t, guarded+"/v1/chat/completions", chatWithImage(img.URL+"/cat.png"))
	wantError(t, resp, body, 400, "could not be fetched")
	refused := errorMessage(t, body)

	_, byHost := vlServerWith(t, nil, func(v *vision.Intake) { v.AllowHTTP = true; v.URLAllow = []string{"localhost"} })
	resp, body = post(t, byHost+"/v1/chat/completions", chatWithImage(redirURL))
	wantError(t, resp, body, 400, "could not be fetched")

	// Control: with the target allowed too, the same redirect works.
	_, both := vlServerWith(t, nil, func(v *vision.Intake) { v.AllowHTTP = true; v.URLAllow = []string{"localhost", "127.0.0.1"} })
	if resp, body := post(t, both+"/v1/chat/completions", chatWithImage(redirURL)); resp.StatusCode != 200 {
		t.Fatalf("redirect with both ends allowed: %d %s", resp.StatusCode, body)
	}

	_, allowed := vlServerWith(t, nil, func(v *vision.Intake) { v.AllowHTTP = true; v.URLAllow = []string{"127.0.0.0/8"} })
	resp, body = post(t, allowed+"/v1/chat/completions", chatWithImage(img.URL+"/cat.png"))
	if resp.StatusCode != 200 {
		t.Fatalf("allowlisted fetch: %d %s", resp.StatusCode, body)
	}
	// No oracle: a missing page and a non-image answer read exactly like
	// a refused address.
	for _, u := range []string{img.URL + "/missing.png", img.URL + "/text"} {
		resp, body = post(t, allowed+"/v1/chat/completions", chatWithImage(u))
		wantError(t, resp, body, 400, "could not be fetched")
		if m := errorMessage(t, body); m != refused {
			t.Errorf("%s: message %q differs from the refused one %q", u, m, refused)
		}
	}
	if n := len(eng.requests()); n != 0 {
		t.Fatalf("%d refused requests reached the engine", n)
	}
}
