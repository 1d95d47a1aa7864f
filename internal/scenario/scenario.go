// Package scenario runs the scenario files of the pure protocol parts
// (replication's partition machine and router, node/clusterview): blocks
// separated by blank lines, each a command (its lines joined, lines
// starting with # left out), a "----" line and the golden output. It is
// for tests only.
package scenario

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var blankLines = regexp.MustCompile(`\n\s*\n`)

// Run runs file's commands through step and compares each output with the
// file's; with update it rewrites the file with the outputs instead.
func Run(t *testing.T, file string, update bool, step func(t *testing.T, cmd string) string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, block := range blankLines.Split(strings.TrimSpace(string(data)), -1) {
		cmd, want, _ := strings.Cut(block, "\n----\n")
		cmd = strings.TrimSuffix(cmd, "\n----")
		var lines []string
		for _, l := range strings.Split(cmd, "\n") {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		got := step(t, strings.Join(lines, " "))
		out.WriteString(cmd + "\n----\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
		out.WriteString("\n")
		if !update && strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", file, cmd, got, want)
		}
	}
	if update {
		if err := os.WriteFile(file, []byte(strings.TrimSpace(out.String())+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
