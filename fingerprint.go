package redrive

import (
	"sort"
	"strings"
)

// maxFingerprint bounds a fingerprint's length in bytes, so that one
// enormous message (a stack trace, a whole response body) does not make a
// group of its own for every trailing difference.
const maxFingerprint = 200

// Fingerprint normalises an error message into the cause it reports, so
// that occurrences which differ only in ids, numbers, quoted text, URLs,
// host:port addresses, UUIDs or hex strings fall into one group: "item 17:
// malformed model output at byte 3912" and "item 90: malformed model output
// at byte 12" both give "item <n>: malformed model output at byte <n>".
// HTTP status codes after "status", "code" or "HTTP" are kept, since a 503
// and a 429 are different causes. White space is collapsed and the result
// is at most 200 bytes, cut at a rune boundary.
//
// Every failure that is stored is fingerprinted, twice for a death (its
// attempt and its reason), so the rules are scanned by hand in passes that
// each take linear time (see fingerprint_rules.go): with regular
// expressions a death spent longer here than a success spends in total.
func Fingerprint(msg string) string {
	s := replaceURLs(msg)
	s = replaceQuoted(s)
	s = replaceSingleQuoted(s)
	s = replaceUUIDs(s)
	s = replaceHostPorts(s)
	s = replaceHexLiterals(s)
	s = replaceHexWords(s)
	s = replaceNumbers(s)
	s = strings.TrimSpace(collapseSpaces(s))
	if len(s) > maxFingerprint {
		s = strings.ToValidUTF8(s[:maxFingerprint], "")
	}
	return s
}

// ErrorGroup is the failures of one pipeline stage that share a cause:
// their class and the fingerprint of their error message.
type ErrorGroup struct {
	Pipeline    string `json:"pipeline"`
	Stage       string `json:"stage"`
	Class       string `json:"class"`
	Fingerprint string `json:"fingerprint"`
	// Dead counts the dead items whose reason falls in the group.
	Dead int `json:"dead"`
	// Failures counts the failed attempts (every outcome but succeeded)
	// whose error falls in the group.
	Failures int `json:"failures"`
	// Messages counts the distinct messages in the group. A store's
	// grouping (Console.FailureGroups) counts them among the group's
	// ErrorSamples newest failures only, so that a group of a million
	// messages costs what a group of twenty does: 1 then means its recent
	// failures all read the same.
	Messages int `json:"messages"`
	// Examples are up to three of its messages: GroupErrors puts the most
	// frequent first, a store's grouping the newest.
	Examples []string `json:"examples"`
	// ExampleItems are the IDs of the items whose failures Examples
	// quote, in the same order, when the store's grouping found them
	// (GroupErrors does not know them). Default: none.
	ExampleItems []int64 `json:"example_items,omitempty"`
}

// maxExamples bounds ErrorGroup.Examples.
const maxExamples = 3

// ErrorSamples is how many of a group's newest failures a store reads to
// pick its examples (ErrorGroup.SetExamples).
const ErrorSamples = 20

// ExampleGroups is how many of the highest ranked groups a store's
// grouping gives examples to; the others have none, so that a pathological
// number of groups (messages the fingerprint does not normalise) costs one
// grouped read, not a read per group.
const ExampleGroups = 200

// ErrorSample is one failure read to pick a group's examples: the item and
// its error message.
type ErrorSample struct {
	ItemID int64
	Error  string
}

// SetExamples sets g's Examples, ExampleItems and Messages from samples of
// its newest failures, newest first: the first occurrences of up to three
// distinct messages, and how many distinct messages the samples hold.
func (g *ErrorGroup) SetExamples(samples []ErrorSample) {
	g.Examples, g.ExampleItems = nil, nil
	seen := map[string]bool{}
	for _, s := range samples {
		if seen[s.Error] {
			continue
		}
		seen[s.Error] = true
		if len(g.Examples) < maxExamples {
			g.Examples = append(g.Examples, s.Error)
			g.ExampleItems = append(g.ExampleItems, s.ItemID)
		}
	}
	g.Messages = len(seen)
}

// RankErrorGroups sorts groups as GroupErrors ranks them: by deaths, then
// failures, then pipeline, stage, class and fingerprint.
func RankErrorGroups(groups []ErrorGroup) {
	sort.Slice(groups, func(a, b int) bool {
		x, y := groups[a], groups[b]
		switch {
		case x.Dead != y.Dead:
			return x.Dead > y.Dead
		case x.Failures != y.Failures:
			return x.Failures > y.Failures
		case x.Pipeline != y.Pipeline:
			return x.Pipeline < y.Pipeline
		case x.Stage != y.Stage:
			return x.Stage < y.Stage
		case x.Class != y.Class:
			return x.Class < y.Class
		}
		return x.Fingerprint < y.Fingerprint
	})
}

// GroupErrors merges exact-message counts of dead items and of failed
// attempts into groups by pipeline, stage, class and fingerprint, ranked by
// deaths, then failures, then pipeline, stage and fingerprint.
func GroupErrors(dead, failed []ErrorCount) []ErrorGroup {
	type key struct{ p, s, c, f string }
	type msg struct {
		text string
		n    int
	}
	idx := map[key]int{}
	var groups []ErrorGroup
	msgs := map[int]map[string]int{}
	add := func(e ErrorCount, isDead bool) {
		k := key{e.Pipeline, e.Stage, e.Class, Fingerprint(e.Error)}
		i, ok := idx[k]
		if !ok {
			i = len(groups)
			idx[k] = i
			groups = append(groups, ErrorGroup{Pipeline: k.p, Stage: k.s, Class: k.c, Fingerprint: k.f})
			msgs[i] = map[string]int{}
		}
		if isDead {
			groups[i].Dead += e.Count
		} else {
			groups[i].Failures += e.Count
		}
		msgs[i][e.Error] += e.Count
	}
	for _, e := range dead {
		add(e, true)
	}
	for _, e := range failed {
		add(e, false)
	}
	for i := range groups {
		ms := make([]msg, 0, len(msgs[i]))
		for t, n := range msgs[i] {
			ms = append(ms, msg{t, n})
		}
		sort.Slice(ms, func(a, b int) bool {
			if ms[a].n != ms[b].n {
				return ms[a].n > ms[b].n
			}
			return ms[a].text < ms[b].text
		})
		groups[i].Messages = len(ms)
		for j := 0; j < len(ms) && j < maxExamples; j++ {
			groups[i].Examples = append(groups[i].Examples, ms[j].text)
		}
	}
	RankErrorGroups(groups)
	return groups
}
