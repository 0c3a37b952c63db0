package web

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Scope is a permission a token grants.
type Scope string

// The scopes. Each endpoint needs exactly one; a token may hold several.
const (
	// ScopeRead reads runs, items, the dead-letter queue and stats. Reads
	// need it only when some configured token holds it; otherwise they
	// are open.
	ScopeRead Scope = "read"
	// ScopeSubmit creates runs and adds items.
	ScopeSubmit Scope = "submit"
	// ScopeAdmin redrives, purges and cancels.
	ScopeAdmin Scope = "admin"
	// ScopeWork leases items of external stages and reports their results
	// (the workers of docs/workers.md).
	ScopeWork Scope = "work"
)

// MinTokenLength is the shortest secret ParseTokens accepts.
const MinTokenLength = 16

// Token is a named bearer token and the scopes it grants.
type Token struct {
	// Name identifies the token in logs; the secret is never logged.
	Name string
	// Scopes are the permissions the token grants.
	Scopes []Scope
	// Secret is the bearer token itself.
	Secret string
}

// ParseTokens reads tokens, one a line as "name scope[,scope] secret";
// blank lines and lines starting with # are skipped. source names the
// input in errors (a file name, or an environment variable), which say
// source:line and never contain a secret.
func ParseTokens(r io.Reader, source string) ([]Token, error) {
	var out []Token
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s:%d: want \"name scope[,scope] token\", got %d fields", source, n, len(f))
		}
		t := Token{Name: f[0], Secret: f[2]}
		for s := range strings.SplitSeq(f[1], ",") {
			sc := Scope(s)
			if sc != ScopeRead && sc != ScopeSubmit && sc != ScopeAdmin && sc != ScopeWork {
				return nil, fmt.Errorf("%s:%d: token %q: unknown scope %q (read, submit, admin or work)", source, n, t.Name, s)
			}
			t.Scopes = append(t.Scopes, sc)
		}
		if len(t.Secret) < MinTokenLength {
			return nil, fmt.Errorf("%s:%d: token %q: secret shorter than %d characters", source, n, t.Name, MinTokenLength)
		}
		for _, o := range out {
			if o.Name == t.Name {
				return nil, fmt.Errorf("%s:%d: token name %q given twice", source, n, t.Name)
			}
			if o.Secret == t.Secret {
				return nil, fmt.Errorf("%s:%d: token %q has the same secret as token %q", source, n, t.Name, o.Name)
			}
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return out, nil
}

// credential is a configured token, kept hashed.
type credential struct {
	name   string
	scopes []Scope
	hash   [sha256.Size]byte
}

// legacyTokenName names Options.Token in logs.
const legacyTokenName = "api-token"

func credentials(o Options) []credential {
	var out []credential
	if o.Token != "" {
		out = append(out, credential{name: legacyTokenName, scopes: []Scope{ScopeSubmit, ScopeAdmin}, hash: sha256.Sum256([]byte(o.Token))})
	}
	for _, t := range o.Tokens {
		out = append(out, credential{name: t.Name, scopes: t.Scopes, hash: sha256.Sum256([]byte(t.Secret))})
	}
	return out
}

// lookup returns the credential whose secret is token. Every credential
// is compared, in constant time over hashes of equal length, so neither
// the position of a match nor the token's length shows in the timing.
func (s *server) lookup(token string) (credential, bool) {
	got := sha256.Sum256([]byte(token))
	found := -1
	for i := range s.creds {
		if subtle.ConstantTimeCompare(got[:], s.creds[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return credential{}, false
	}
	return s.creds[found], true
}

func (s *server) configured(scope Scope) bool {
	for _, c := range s.creds {
		if slices.Contains(c.scopes, scope) {
			return true
		}
	}
	return false
}

// tokenNameKey carries the authenticated token's name to the request log.
type tokenNameKey struct{}

// require guards an endpoint with a scope. Missing or unknown tokens get
// 401; a valid token without the scope, or a scope no token grants, 403.
// Reads are open while no token grants ScopeRead.
func (s *server) require(scope Scope, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.configured(scope) {
			if scope == ScopeRead {
				h(w, r)
				return
			}
			writeError(w, http.StatusForbidden, "", fmt.Sprintf("%s endpoints are disabled: no API token is configured on the server with the %s scope", scope, scope))
			return
		}
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		token = strings.TrimSpace(token)
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
			writeError(w, http.StatusUnauthorized, "", "missing bearer token: send Authorization: Bearer <token>")
			return
		}
		c, ok := s.lookup(token)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="redrive", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, "", "invalid bearer token")
			return
		}
		if n, ok := r.Context().Value(tokenNameKey{}).(*string); ok {
			*n = c.name
		}
		if !slices.Contains(c.scopes, scope) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="redrive", error="insufficient_scope", scope="%s"`, scope))
			writeError(w, http.StatusForbidden, "", fmt.Sprintf("token %q lacks the %s scope this endpoint needs", c.name, scope))
			return
		}
		h(w, r)
	}
}
