package policyfile

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CorpusCase is one document of the validation corpus
// (testdata/policies): its file and what its first line says the
// apiserver's verdict is: "# want: valid" or "# want: <field>", the field
// the rejection must name.
type CorpusCase struct {
	File string
	// Field is empty for a valid document.
	Field string
}

// ReadCorpus lists the corpus in dir. The unit tests check Check against
// it and the e2e tests check `rebound policy validate` and a real
// apiserver against it, so all three judge the same files.
func ReadCorpus(dir string) ([]CorpusCase, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no corpus in %s: %v", dir, err)
	}
	var out []CorpusCase
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		first, _ := bufio.NewReader(bytes.NewReader(data)).ReadString('\n')
		want, ok := strings.CutPrefix(strings.TrimSpace(first), "# want: ")
		if !ok {
			return nil, fmt.Errorf("%s: the first line must be \"# want: valid\" or \"# want: <field>\"", f)
		}
		c := CorpusCase{File: f}
		if want != "valid" {
			c.Field = want
		}
		out = append(out, c)
	}
	return out, nil
}
