package front

import (
	"net/http"
	"strings"
)

// corsHeaders are the request headers a browser client of this API sends
// besides the CORS-safelisted ones (the openai SDK adds its x-stainless-*
// telemetry headers too, so a preflight's own list is echoed when given).
const corsHeaders = "Authorization, Content-Type, X-Request-Id"

// cors adds CORS headers for an allowed Origin and answers a preflight
// (OPTIONS with Access-Control-Request-Method); true: the request was
// answered here. With no origins configured nothing changes: a preflight
// then meets the mux's 405 like any other OPTIONS.
func (d *Door) cors(w http.ResponseWriter, r *http.Request, origins []string) bool {
	if len(origins) == 0 {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	allow, ok := AllowedOrigin(origins, origin)
	h := w.Header()
	h.Add("Vary", "Origin")
	if !ok {
		if preflight {
			WriteError(w, Errorf(http.StatusForbidden, "cors_origin_not_allowed", "", "origin %s is not in gateway.cors_origins", origin))
			return true
		}
		return false // no CORS headers: the browser withholds the answer
	}
	h.Set("Access-Control-Allow-Origin", allow)
	h.Set("Access-Control-Expose-Headers", "X-Request-Id, Retry-After, X-SMG-Error-Code")
	if !preflight {
		return false
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	if rh := r.Header.Get("Access-Control-Request-Headers"); rh != "" {
		h.Set("Access-Control-Allow-Headers", rh)
	} else {
		h.Set("Access-Control-Allow-Headers", corsHeaders)
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// AllowedOrigin is the Access-Control-Allow-Origin value for origin, if
// the list allows it ("*" allows any and is answered as "*").
func AllowedOrigin(list []string, origin string) (string, bool) {
	o := strings.TrimSuffix(origin, "/")
	for _, a := range list {
		if a == "*" {
			return "*", true
		}
		if strings.EqualFold(strings.TrimSuffix(a, "/"), o) {
			return origin, true
		}
	}
	return "", false
}
