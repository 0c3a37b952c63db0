// Command llmtool holds the small commands of the llm-batch example:
//
//	llmtool gen -n 3000 -bad 4 -seed 1 > items.jsonl   write the items (a few malformed)
//	llmtool prepare  < item.json                       validate and normalise an item (exec stage)
//	llmtool validate < answer.json                     check the model's answer (exec stage)
//
// The stage commands follow the runner's exit codes: 0 success (JSON on
// stdout), 65 (EX_DATAERR) for input that no retry can fix, which the runner
// treats as final.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"unicode"
)

// exitFinal is EX_DATAERR: bad data, final for the runner.
const exitFinal = 65

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: llmtool gen|prepare|validate")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "gen":
		gen(os.Args[2:])
	case "prepare":
		prepare()
	case "validate":
		validate()
	default:
		fmt.Fprintf(os.Stderr, "llmtool: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

var words = strings.Fields(`the a retry budget breaker queue item stage worker lease token model prompt
answer summary document archive message chunk thread batch run pipeline error backoff jitter limit
quick brown fox jumps over lazy dog reliable flaky network timeout server client`)

// gen writes n items; every n/bad-th one is broken: alternately a line that
// is not JSON (dead as invalid_input) and an item without text (dead at the
// prepare stage).
func gen(args []string) {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	n := fs.Int("n", 3000, "number of items")
	bad := fs.Int("bad", 4, "number of deliberately malformed items")
	seed := fs.Uint64("seed", 1, "random seed")
	fs.Parse(args)
	r := rand.New(rand.NewPCG(*seed, 0))
	step := 0
	if *bad > 0 {
		step = *n / *bad
	}
	out := os.Stdout
	for i := 1; i <= *n; i++ {
		if step > 0 && i%step == step/2 {
			if (i/step)%2 == 0 {
				fmt.Fprintf(out, "{\"id\": \"doc-%05d\", \"text\": \"this line is cut\n", i)
			} else {
				fmt.Fprintf(out, "{\"id\": \"doc-%05d\", \"title\": \"no text here\"}\n", i)
			}
			continue
		}
		k := 4 + r.IntN(12)
		ws := make([]string, k)
		for j := range ws {
			ws[j] = words[r.IntN(len(words))]
		}
		b, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("doc-%05d", i), "text": "  " + strings.Join(ws, "  ") + " "})
		fmt.Fprintf(out, "%s\n", b)
	}
}

func die(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	os.Exit(code)
}

// prepare checks that the item has a non-empty text and turns it into a
// prompt: white space collapsed, lower case, at most 200 characters.
func prepare() {
	var in struct {
		ID   string `json:"id"`
		Text string `json:"text"`
	}
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		die(75, "reading stdin: %v", err) // EX_TEMPFAIL: retry
	}
	if err := json.Unmarshal(b, &in); err != nil {
		die(exitFinal, "item is not a JSON object: %v", err)
	}
	text := strings.Join(strings.FieldsFunc(in.Text, unicode.IsSpace), " ")
	if text == "" {
		die(exitFinal, "item %s has no text", in.ID)
	}
	text = strings.ToLower(text)
	if len(text) > 200 {
		text = text[:200]
	}
	json.NewEncoder(os.Stdout).Encode(map[string]string{"id": in.ID, "prompt": "summarize: " + text})
}

// validate checks the model's answer, as wrapped by the http stage
// (output: wrap): a JSON object with a non-empty completion. Malformed model
// output is final: asking again would cost money for the same garbage.
func validate() {
	var in struct {
		Input struct {
			ID     string `json:"id"`
			Prompt string `json:"prompt"`
		} `json:"input"`
		Response json.RawMessage `json:"response"`
	}
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		die(75, "reading stdin: %v", err)
	}
	if err := json.Unmarshal(b, &in); err != nil {
		die(exitFinal, "stage input is not JSON: %v", err)
	}
	var answer struct {
		Completion *string `json:"completion"`
		Model      string  `json:"model"`
		Tokens     int     `json:"tokens"`
	}
	if len(in.Response) > 0 && in.Response[0] == '"' {
		var raw string
		json.Unmarshal(in.Response, &raw)
		if len(raw) > 40 {
			raw = raw[:40] + "…"
		}
		die(exitFinal, "malformed model output: not JSON: %q", raw)
	}
	if err := json.Unmarshal(in.Response, &answer); err != nil || answer.Completion == nil {
		die(exitFinal, "malformed model output: no completion")
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"id": in.Input.ID, "summary": *answer.Completion, "model": answer.Model, "tokens": answer.Tokens,
	})
}
