package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"
)

// logFormat is the value of --log-format: text (slog's key=value lines,
// the default) or json (one JSON object per line, for log shippers).
type logFormat string

const (
	logText logFormat = "text"
	logJSON logFormat = "json"
)

func (f *logFormat) String() string { return string(*f) }
func (f *logFormat) Type() string   { return "format" }
func (f *logFormat) Set(s string) error {
	switch logFormat(s) {
	case logText, logJSON:
		*f = logFormat(s)
		return nil
	}
	return fmt.Errorf("want json or text")
}

// logFormatFlag registers --log-format on fs (and its $WEIR_LOG_FORMAT).
func logFormatFlag(fs *pflag.FlagSet) *logFormat {
	f := logText
	fs.Var(&f, "log-format", "log `format`: text or json")
	withEnv(fs, "log-format")
	return &f
}

// newLogger writes records of level and above to w in format f.
func newLogger(w io.Writer, f logFormat, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if f == logJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
