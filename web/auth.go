package web

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
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

// MaxActorBytes bounds the name an Options.ActorHeader carries.
const MaxActorBytes = 200

// proxyActor returns the person the trusted header of Options.ActorHeader
// names, "" when it is not configured or the request has none, or an
// error when the value cannot be a name (too long, control characters).
func (s *server) proxyActor(r *http.Request) (string, error) {
	if s.opts.ActorHeader == "" {
		return "", nil
	}
	vs := r.Header.Values(s.opts.ActorHeader)
	if len(vs) == 0 {
		return "", nil
	}
	if len(vs) > 1 {
		return "", fmt.Errorf("header %s given more than once", s.opts.ActorHeader)
	}
	v := strings.TrimSpace(vs[0])
	if v == "" {
		return "", nil
	}
	if err := CheckActor(v); err != nil {
		return "", fmt.Errorf("header %s: %w", s.opts.ActorHeader, err)
	}
	return v, nil
}

// CheckActor reports a name that the audit log cannot record as an actor:
// empty, longer than MaxActorBytes, or holding control characters or
// invalid UTF-8 (which would let it forge lines of a log).
func CheckActor(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("empty name")
	case len(name) > MaxActorBytes:
		return fmt.Errorf("name longer than %d bytes", MaxActorBytes)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		return errors.New("name holds control characters or invalid UTF-8")
	}
	return nil
}

// tokenName returns the name of the token request r authenticated with,
// "" before it did (or without one).
func tokenName(r *http.Request) string {
	if n, ok := r.Context().Value(tokenNameKey{}).(*string); ok {
		return *n
	}
	return ""
}

// whoamiResponse is the response of GET /api/v1/whoami.
type whoamiResponse struct {
	// ReadsProtected is true when reads need a token with the read scope
	// (some configured token grants it).
	ReadsProtected bool `json:"reads_protected"`
	// Configured lists the scopes that some configured token grants: an
	// endpoint of another scope answers 403 whatever the token.
	Configured []Scope `json:"configured"`
	// Token is the token the request sent; absent without one.
	Token *tokenInfo `json:"token,omitempty"`
	// Actor is who the audit log would record as acting: the person the
	// trusted proxy header names, else the token's name ("default" for
	// Options.Token); empty without either.
	Actor string `json:"actor,omitempty"`
	// ActorHeader names the trusted header the actor comes from; empty
	// when none is configured.
	ActorHeader string `json:"actor_header,omitempty"`
}

// tokenInfo names a token and its scopes, never its secret.
type tokenInfo struct {
	Name   string  `json:"name"`
	Scopes []Scope `json:"scopes"`
}

// GET /api/v1/whoami: which scopes the sent token grants and who would be
// recorded as acting, so that the console asks for a token only when it
// needs one, and for the scope it needs. It needs no scope; a token that
// is sent must be valid (401 otherwise).
func (s *server) whoami(w http.ResponseWriter, r *http.Request) {
	if q := newQuery(r); q.err != nil {
		writeBad(w, q.err)
		return
	}
	resp := whoamiResponse{ReadsProtected: s.configured(ScopeRead), Configured: []Scope{}, ActorHeader: s.opts.ActorHeader}
	for _, sc := range []Scope{ScopeRead, ScopeSubmit, ScopeAdmin} {
		if s.configured(sc) {
			resp.Configured = append(resp.Configured, sc)
		}
	}
	if r.Header.Get("Authorization") != "" {
		c, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		resp.Token = &tokenInfo{Name: s.tokenLabel(c.name), Scopes: c.scopes}
	}
	person, err := s.proxyActor(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, s.opts.ActorHeader, err.Error())
		return
	}
	switch {
	case person != "":
		resp.Actor = person
	case resp.Token != nil:
		resp.Actor = resp.Token.Name
	}
	writeJSON(w, http.StatusOK, resp)
}

// tokenLabel is how the console and the audit log name a token: its name,
// "default" for Options.Token.
func (s *server) tokenLabel(name string) string {
	if name == legacyTokenName {
		return actorDefault
	}
	return name
}

// authenticate reads the bearer token of r and returns its credential. A
// missing or unknown token is answered with 401 and false.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request) (credential, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="redrive"`)
		writeError(w, http.StatusUnauthorized, "", "missing bearer token: send Authorization: Bearer <token>")
		return credential{}, false
	}
	c, ok := s.lookup(token)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="redrive", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "", "invalid bearer token")
		return credential{}, false
	}
	if n, ok := r.Context().Value(tokenNameKey{}).(*string); ok {
		*n = c.name
	}
	return c, true
}

// require guards an endpoint with a scope. Missing or unknown tokens get
// 401; a valid token without the scope, or a scope no token grants, 403.
// Reads are open while no token grants ScopeRead. A value of
// Options.ActorHeader that cannot be a name gets 400, whatever the scope.
func (s *server) require(scope Scope, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.proxyActor(r); err != nil {
			writeError(w, http.StatusBadRequest, s.opts.ActorHeader, err.Error())
			return
		}
		if !s.configured(scope) {
			if scope == ScopeRead {
				h(w, r)
				return
			}
			writeError(w, http.StatusForbidden, "", fmt.Sprintf("%s endpoints are disabled: no API token is configured on the server with the %s scope", scope, scope))
			return
		}
		c, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		if !slices.Contains(c.scopes, scope) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="redrive", error="insufficient_scope", scope="%s"`, scope))
			writeError(w, http.StatusForbidden, "", fmt.Sprintf("token %q lacks the %s scope this endpoint needs", c.name, scope))
			return
		}
		h(w, r)
	}
}
