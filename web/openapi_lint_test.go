package web_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestOpenAPILint checks docs/openapi.yaml with a validator of its own,
// Redocly CLI's recommended rules (scripts/lint-openapi.sh), so that a
// description generated clients would misread — a key a YAML flow mapping
// split off a description, say — fails here and not in a client. It needs
// node and npm (the script installs the pinned Redocly CLI); without them
// it skips, unless CI is set.
func TestOpenAPILint(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is required in CI to lint docs/openapi.yaml: %v", tool, err)
			}
			t.Skipf("%s not installed; docs/openapi.yaml not linted", tool)
		}
	}
	out, err := exec.Command("bash", "../scripts/lint-openapi.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/lint-openapi.sh: %v\n%s", err, out)
	}
}
