package main

import (
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
)

// newLogger builds the process logger: one structured line per event, text or JSON.
func newLogger(w io.Writer, level, format string) (hclog.Logger, error) {
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q: use trace, debug, info, warn or error", level)
	}
	var json bool
	switch format {
	case "text":
	case "json":
		json = true
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", format)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       "latch",
		Level:      lvl,
		Output:     w,
		JSONFormat: json,
		// A sub-logger's SetLevel is its own: the audit trail logs at INFO under any level.
		IndependentLevels: true,
	}), nil
}
