package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The checks a pipeline file gets before it runs (Spec.Pipeline), so that a
// mistake in it stops the run at once with the file and line, rather than
// failing every item, or worse, silently doing something else.

// checkEnv reports the first ${VAR} in s that the environment does not
// define: an undefined variable would otherwise become an empty string,
// and a URL such as "${API}/x" would send every attempt to "/x".
func checkEnv(p Pos, what, s string) error {
	for _, m := range envRef.FindAllString(s, -1) {
		name := m[2 : len(m)-1]
		if _, ok := os.LookupEnv(name); !ok {
			return at(p, "%s uses ${%s}, which is not set in the environment (set it, even to an empty value, or remove it)", what, name)
		}
	}
	return nil
}

// checkStageEnv checks every ${VAR} a stage expands.
func (st *StageSpec) checkEnv() error {
	type field struct {
		pos  Pos
		what string
		s    string
	}
	var fs []field
	if e := st.Exec; e != nil {
		pos := func(k string) Pos { return keyPos(e.Keys, k, e.Pos) }
		fs = append(fs, field{pos("command"), "command", e.Command}, field{pos("dir"), "dir", e.Dir})
		for _, a := range e.Args {
			fs = append(fs, field{pos("args"), "args", a})
		}
		for k, v := range e.Env {
			fs = append(fs, field{pos("env"), "env " + k, v})
		}
	}
	if h := st.HTTP; h != nil {
		pos := func(k string) Pos { return keyPos(h.Keys, k, h.Pos) }
		fs = append(fs, field{pos("url"), "url", h.URL})
		if h.Body != nil {
			fs = append(fs, field{pos("body"), "body", *h.Body})
		}
		for k, v := range h.Headers {
			fs = append(fs, field{pos("headers"), "header " + k, v})
		}
	}
	for _, f := range fs {
		if err := checkEnv(f.pos, "stage "+quote(st.Name)+": "+f.what, f.s); err != nil {
			return err
		}
	}
	return nil
}

func quote(s string) string { return `"` + s + `"` }

// commandPath resolves an exec stage's command: a name without a slash is
// looked up in PATH; a relative path with one is relative to the pipeline
// file's directory, made absolute so that neither the stage's dir nor
// filepath.Join's cleaning ("./stage.sh" joined to "." is "stage.sh", a
// name PATH would be searched for) changes what runs.
func (s *Spec) commandPath(st *StageSpec) (string, error) {
	e := st.Exec
	command := expandEnv(e.Command)
	if strings.ContainsRune(command, filepath.Separator) && !filepath.IsAbs(command) {
		abs, err := filepath.Abs(filepath.Join(s.dir(), command))
		if err != nil {
			return "", at(keyPos(e.Keys, "command", e.Pos), "stage %q: command %q: %v", st.Name, e.Command, err)
		}
		command = abs
	}
	path, err := exec.LookPath(command)
	if err != nil {
		where := "in $PATH"
		if filepath.IsAbs(command) {
			where = "(" + command + ")"
		}
		return "", at(keyPos(e.Keys, "command", e.Pos), "stage %q: command %q not found or not executable %s: %v", st.Name, e.Command, where, err)
	}
	return path, nil
}
