package redrive

import "strings"

// The passes of Fingerprint, in its order. Each is the replacement of every
// match of one regular expression, leftmost first and without overlaps, as
// regexp's ReplaceAllString does (the expression is quoted above each
// pass), scanned by hand: a pass reads each byte a bounded number of times
// and returns its input unchanged, without allocating, when nothing
// matches. The expressions themselves are kept in the tests, which check
// that the passes agree with them on generated and fuzzed messages.
//
// A byte is the unit throughout: every character the rules name is ASCII,
// and the byte of a multi-byte character is neither a word character nor
// any of them, as the character itself is not.

// rewrite builds a copy of s with spans replaced, allocating at the first
// replacement only.
type rewrite struct {
	s    string
	b    []byte
	last int // s[:last] has been written to b
}

// replace writes s up to from, then with in place of s[from:to].
func (w *rewrite) replace(from, to int, with string) {
	if w.b == nil {
		w.b = make([]byte, 0, len(w.s))
	}
	w.b = append(w.b, w.s[w.last:from]...)
	w.b = append(w.b, with...)
	w.last = to
}

func (w *rewrite) String() string {
	if w.b == nil {
		return w.s
	}
	return string(append(w.b, w.s[w.last:]...))
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isHex(c byte) bool    { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// isWord is \w: an ASCII letter, digit or underscore.
func isWord(c byte) bool { return isLetter(c) || isDigit(c) || c == '_' }

// isSpace is \s: [\t\n\f\r ].
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// boundary is \b at i: a word character on one side of i only.
func boundary(s string, i int) bool {
	return (i > 0 && isWord(s[i-1])) != (i < len(s) && isWord(s[i]))
}

// wordEnds reports whether \b holds at i when s[i-1] is a word character:
// s ends at i or a non-word character follows.
func wordEnds(s string, i int) bool { return i == len(s) || !isWord(s[i]) }

// scanWhile returns the end of the run of bytes from i that in accepts.
func scanWhile(s string, i int, in func(byte) bool) int {
	for i < len(s) && in(s[i]) {
		i++
	}
	return i
}

// replaceURLs: [a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]*[^\s"'<>.,:;)\]] → <url>.
//
// The scheme's characters exclude ':', so a match's scheme is the run of
// them before a "://", from its first letter; the rest is the run of
// characters up to a space, quote or angle bracket, without its trailing
// punctuation.
func replaceURLs(s string) string {
	w := rewrite{s: s}
	for i := 0; ; {
		k := strings.Index(s[i:], "://")
		if k < 0 {
			break
		}
		k += i
		st := k
		for st > w.last && isSchemeChar(s[st-1]) {
			st--
		}
		for st < k && !isLetter(s[st]) {
			st++
		}
		end := -1
		if st < k {
			for j := k + 3; j < len(s) && !isURLStop(s[j]); j++ {
				if !isURLEndPunct(s[j]) {
					end = j + 1
				}
			}
		}
		if end < 0 {
			i = k + 1
			continue
		}
		w.replace(st, end, "<url>")
		i = end
	}
	return w.String()
}

func isSchemeChar(c byte) bool {
	return isLetter(c) || isDigit(c) || c == '+' || c == '.' || c == '-'
}

func isURLStop(c byte) bool { return isSpace(c) || c == '"' || c == '\'' || c == '<' || c == '>' }

func isURLEndPunct(c byte) bool {
	return c == '.' || c == ',' || c == ':' || c == ';' || c == ')' || c == ']'
}

// replaceQuoted: "(?:[^"\\\n]|\\.)*"|`[^`\n]*` → <quoted>.
//
// A quote that is not closed before a line break (or a backslash before
// one, or the end) starts no match, and neither does any quote of the same
// kind that its scan passed: those were escaped, and a scan from one of
// them would read on exactly as the first did. Remembering where each kind
// last failed keeps the pass linear.
func replaceQuoted(s string) string {
	if strings.IndexByte(s, '"') < 0 && strings.IndexByte(s, '`') < 0 {
		return s
	}
	w := rewrite{s: s}
	// No match starts with a double quote before dqFailed; a failed
	// backquote needs no such mark, since no backquote lies inside its scan.
	dqFailed := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && i >= dqFailed:
			j, end := i+1, -1
		scan:
			for j < len(s) {
				switch s[j] {
				case '"':
					end = j + 1
					break scan
				case '\n':
					break scan
				case '\\':
					if j+1 == len(s) || s[j+1] == '\n' {
						break scan
					}
					j += 2
				default:
					j++
				}
			}
			if end < 0 {
				dqFailed = j
				continue
			}
			w.replace(i, end, "<quoted>")
			i = end - 1
		case c == '`':
			j := i + 1
			for j < len(s) && s[j] != '`' && s[j] != '\n' {
				j++
			}
			if j == len(s) || s[j] == '\n' {
				continue
			}
			w.replace(i, j+1, "<quoted>")
			i = j
		}
	}
	return w.String()
}

// replaceSingleQuoted: (^|[\s(\[{:=,])'[^'\n]*' → $1<quoted>.
//
// A single quote opens quoted text only at the start or after a space or
// one of ([{:=, so "can't" is left alone; the character before it is kept.
func replaceSingleQuoted(s string) string {
	if strings.IndexByte(s, '\'') < 0 {
		return s
	}
	w := rewrite{s: s}
	for q := 0; q < len(s); q++ {
		if s[q] != '\'' {
			continue
		}
		if q > 0 && (q-1 < w.last || !opensQuote(s[q-1])) {
			continue
		}
		j := q + 1
		for j < len(s) && s[j] != '\'' && s[j] != '\n' {
			j++
		}
		if j == len(s) || s[j] == '\n' {
			q = j // no quote lies between: the scan would have closed on it
			continue
		}
		w.replace(q, j+1, "<quoted>")
		q = j
	}
	return w.String()
}

func opensQuote(c byte) bool {
	return isSpace(c) || c == '(' || c == '[' || c == '{' || c == ':' || c == '=' || c == ','
}

// replaceUUIDs: (?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b → <uuid>.
func replaceUUIDs(s string) string {
	const n = 36
	if len(s) < n || strings.IndexByte(s, '-') < 0 {
		return s
	}
	w := rewrite{s: s}
	for i := 0; i+n <= len(s); i++ {
		if !isHex(s[i]) || (i > 0 && isWord(s[i-1])) || !isUUID(s[i:i+n]) || !wordEnds(s, i+n) {
			continue
		}
		w.replace(i, i+n, "<uuid>")
		i += n - 1
	}
	return w.String()
}

func isUUID(u string) bool {
	for i := range len(u) {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if u[i] != '-' {
				return false
			}
		} else if !isHex(u[i]) {
			return false
		}
	}
	return true
}

// replaceHostPorts replaces, with <host:port>, what the first of these
// matches at the leftmost place where any does:
//
//	\[[0-9a-fA-F:.]*\]:\d+
//	\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b
//	\b(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+):\d{1,5}\b
func replaceHostPorts(s string) string {
	if strings.IndexByte(s, ':') < 0 && strings.IndexByte(s, '.') < 0 {
		return s
	}
	w := rewrite{s: s}
	// A dotted name that failed from one place fails from every later
	// place up to where its scan stopped: the scan from there reads the
	// same labels to the same end, and no more of them.
	namesFailed := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		end := -1
		if c == '[' {
			end = bracketedHostPort(s, i)
		}
		if end < 0 && boundary(s, i) {
			if isDigit(c) {
				end = ipv4(s, i)
			}
			if end < 0 && isLabelChar(c) {
				if strings.HasPrefix(s[i:], "localhost") {
					end = port(s, i+len("localhost"), 5)
				}
				if end < 0 && i >= namesFailed {
					var stop int
					end, stop = dottedName(s, i)
					if end < 0 {
						namesFailed = stop
					}
				}
			}
		}
		if end < 0 {
			continue
		}
		w.replace(i, end, "<host:port>")
		i = end - 1
	}
	return w.String()
}

func isLabelChar(c byte) bool { return isLetter(c) || isDigit(c) || c == '-' }

func isBracketedHostChar(c byte) bool { return isHex(c) || c == ':' || c == '.' }

// bracketedHostPort matches \[[0-9a-fA-F:.]*\]:\d+ at i, where s[i] is
// '[', and returns its end, or -1.
func bracketedHostPort(s string, i int) int {
	j := scanWhile(s, i+1, isBracketedHostChar)
	if j+1 >= len(s) || s[j] != ']' || s[j+1] != ':' {
		return -1
	}
	k := scanWhile(s, j+2, isDigit)
	if k == j+2 {
		return -1
	}
	return k
}

// ipv4 matches (?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b at i, where \b holds,
// and returns its end, or -1. Each number is a whole run of digits: a
// shorter one would be followed by a digit, where neither '.' nor \b can
// be.
func ipv4(s string, i int) int {
	p := i
	for range 3 {
		q := scanWhile(s, p, isDigit)
		if q == p || q-p > 3 || q == len(s) || s[q] != '.' {
			return -1
		}
		p = q + 1
	}
	q := scanWhile(s, p, isDigit)
	if q == p || q-p > 3 {
		return -1
	}
	if q < len(s) && s[q] == ':' {
		if k := scanWhile(s, q+1, isDigit); k > q+1 && wordEnds(s, k) {
			return k
		}
	}
	if wordEnds(s, q) {
		return q
	}
	return -1
}

// port matches :\d{1,digits}\b at i and returns its end, or -1.
func port(s string, i, digits int) int {
	if i >= len(s) || s[i] != ':' {
		return -1
	}
	k := scanWhile(s, i+1, isDigit)
	if k == i+1 || k-i-1 > digits || !wordEnds(s, k) {
		return -1
	}
	return k
}

// dottedName matches [a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+:\d{1,5}\b at i and
// returns its end, or -1 and where its scan of labels stopped. Each label
// is a whole run of label characters: a shorter one would be followed by
// one, where neither '.' nor ':' can be.
func dottedName(s string, i int) (end, stop int) {
	p := scanWhile(s, i, isLabelChar)
	labels := 1
	for p+1 < len(s) && s[p] == '.' && isLabelChar(s[p+1]) {
		p = scanWhile(s, p+1, isLabelChar)
		labels++
	}
	if labels < 2 {
		return -1, p
	}
	if end = port(s, p, 5); end < 0 {
		return -1, p
	}
	return end, p
}

// replaceHexLiterals: \b0[xX][0-9a-fA-F]+\b → <hex>.
func replaceHexLiterals(s string) string {
	if !strings.Contains(s, "0x") && !strings.Contains(s, "0X") {
		return s
	}
	w := rewrite{s: s}
	for i := 0; i+2 < len(s); i++ {
		if s[i] != '0' || (s[i+1] != 'x' && s[i+1] != 'X') || (i > 0 && isWord(s[i-1])) {
			continue
		}
		k := scanWhile(s, i+2, isHex)
		if k == i+2 || !wordEnds(s, k) {
			continue
		}
		w.replace(i, k, "<hex>")
		i = k - 1
	}
	return w.String()
}

// replaceHexWords: \b[0-9a-fA-F]{6,}\b → <hex>, for words that have a
// letter and a digit. A match is a whole word (a run of \w), since no
// boundary lies inside one. A word that is all digits is a number, and
// one that starts and ends with a letter is kept as a word ("facade",
// "deadbeef", "abc123def"): as the rule has always read.
func replaceHexWords(s string) string {
	w := rewrite{s: s}
	for i := 0; i < len(s); {
		if !isWord(s[i]) {
			i++
			continue
		}
		j := scanWhile(s, i, isWord)
		if j-i >= 6 && scanWhile(s, i, isHex) == j && (isDigit(s[i]) || isDigit(s[j-1])) && scanWhile(s, i, isDigit) != j {
			w.replace(i, j, "<hex>")
		}
		i = j
	}
	return w.String()
}

// replaceNumbers: \d+(?:\.\d+)? → <n>, except in the HTTP status codes
// that (?i)\b(?:status|code|http(?:/\d(?:\.\d)?)?)(?: code)?[ :=]+[1-5]\d\d\b
// matches, which are kept whole. A number never runs into a status code:
// one starts at a boundary with a letter, or with ſ after a word character.
func replaceNumbers(s string) string {
	w := rewrite{s: s}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isDigit(c) {
			k := scanWhile(s, i, isDigit)
			if k+1 < len(s) && s[k] == '.' && isDigit(s[k+1]) {
				k = scanWhile(s, k+1, isDigit)
			}
			w.replace(i, k, "<n>")
			i = k - 1
			continue
		}
		if c == 's' || c == 'S' || c == 'c' || c == 'C' || c == 'h' || c == 'H' || c == 0xc5 {
			if end := statusCode(s, i); end > 0 {
				i = end - 1
			}
		}
	}
	return w.String()
}

// statusCode matches the status code expression at i and returns its end,
// or -1.
func statusCode(s string, i int) int {
	if !boundary(s, i) {
		return -1
	}
	j := foldedPrefix(s, i, "status")
	if j < 0 {
		j = foldedPrefix(s, i, "code")
	}
	if j < 0 {
		if j = foldedPrefix(s, i, "http"); j >= 0 && j+1 < len(s) && s[j] == '/' && isDigit(s[j+1]) {
			j += 2
			if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
				j += 2
			}
		}
	}
	if j < 0 {
		return -1
	}
	if j < len(s) && s[j] == ' ' {
		if k := foldedPrefix(s, j+1, "code"); k >= 0 {
			j = k
		}
	}
	k := scanWhile(s, j, func(c byte) bool { return c == ' ' || c == ':' || c == '=' })
	if k == j || k+3 > len(s) || s[k] < '1' || s[k] > '5' || !isDigit(s[k+1]) || !isDigit(s[k+2]) || !wordEnds(s, k+3) {
		return -1
	}
	return k + 3
}

// foldedPrefix matches lit, lower-case ASCII, at i as (?i) does: each
// letter in either case, and 's' also as ſ (U+017F), which folds to it. It
// returns the end of the match, or -1.
func foldedPrefix(s string, i int, lit string) int {
	for n := 0; n < len(lit); n++ {
		switch {
		case i < len(s) && s[i]|0x20 == lit[n] && isLetter(s[i]):
			i++
		case lit[n] == 's' && strings.HasPrefix(s[i:], "ſ"):
			i += len("ſ")
		default:
			return -1
		}
	}
	return i
}

// collapseSpaces: \s+ → a single space.
func collapseSpaces(s string) string {
	w := rewrite{s: s}
	for i := 0; i < len(s); i++ {
		if !isSpace(s[i]) {
			continue
		}
		k := scanWhile(s, i, isSpace)
		if k-i > 1 || s[i] != ' ' {
			w.replace(i, k, " ")
		}
		i = k - 1
	}
	return w.String()
}
