package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data atomically: it writes a temporary file
// beside it, fsyncs it, renames it over path and fsyncs the directory. A
// crash at any point leaves the previous file or the new one.
func WriteFile(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing counters file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing counters file %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing counters file: %w", err)
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // the rename is durable once the directory is
		_ = d.Close()
	}
	return nil
}

// ReadFile reads and decodes path. A missing file is (Snapshot{}, nil):
// nothing was written yet. Any other failure wraps ErrCorrupt, ErrVersion
// or the read error.
func ReadFile(path string) (Snapshot, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Snapshot{}, nil
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading counters file: %w", err)
	}
	return Decode(b)
}
