// Package logs builds a latch process's logger: hclog, one structured line per event, as
// text or as JSON for log pipelines. It decides how values look in JSON lines (durations in
// seconds, no nested Go structs); it never decides what is logged.
package logs

import (
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/hashicorp/go-hclog"
)

// New builds the process logger from --log-level and --log-format: one structured line per
// event, text or JSON. JSON lines carry durations as seconds (a number) and no Go structs
// (see jsonLog).
func New(w io.Writer, level, format string) (hclog.Logger, error) {
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
	l := hclog.New(&hclog.LoggerOptions{
		Name:       "latch",
		Level:      lvl,
		Output:     w,
		JSONFormat: json,
		// A sub-logger's SetLevel is its own: the audit trail logs at INFO under any level.
		IndependentLevels: true,
	})
	if json {
		return jsonLog{l}, nil
	}
	return l, nil
}

// jsonLog rewrites the values of a JSON logger's lines for log pipelines: a time.Duration
// (which hclog writes as integer nanoseconds) becomes seconds as a float, and a struct,
// map or slice of structs that is neither an error nor a fmt.Stringer (which hclog would
// write as a nested object of Go field names) becomes its %+v text.
type jsonLog struct{ hclog.Logger }

func (j jsonLog) Log(level hclog.Level, msg string, args ...any) {
	j.Logger.Log(level, msg, jsonArgs(args)...)
}
func (j jsonLog) Trace(msg string, args ...any) { j.Logger.Trace(msg, jsonArgs(args)...) }
func (j jsonLog) Debug(msg string, args ...any) { j.Logger.Debug(msg, jsonArgs(args)...) }
func (j jsonLog) Info(msg string, args ...any)  { j.Logger.Info(msg, jsonArgs(args)...) }
func (j jsonLog) Warn(msg string, args ...any)  { j.Logger.Warn(msg, jsonArgs(args)...) }
func (j jsonLog) Error(msg string, args ...any) { j.Logger.Error(msg, jsonArgs(args)...) }
func (j jsonLog) With(args ...any) hclog.Logger { return jsonLog{j.Logger.With(jsonArgs(args)...)} }
func (j jsonLog) Named(name string) hclog.Logger {
	return jsonLog{j.Logger.Named(name)}
}
func (j jsonLog) ResetNamed(name string) hclog.Logger {
	return jsonLog{j.Logger.ResetNamed(name)}
}

// jsonArgs returns args with the values (odd positions) rewritten; args itself is not
// changed.
func jsonArgs(args []any) []any {
	var out []any
	for i := 1; i < len(args); i += 2 {
		v, ok := jsonValue(args[i])
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = v
	}
	if out == nil {
		return args
	}
	return out
}

// jsonValue is v as a JSON log should carry it, and whether that differs from v.
func jsonValue(v any) (any, bool) {
	switch x := v.(type) {
	case time.Duration:
		return x.Seconds(), true
	case nil, error, fmt.Stringer, hclog.Format, time.Time:
		return nil, false
	}
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct || t.Kind() == reflect.Map {
		return fmt.Sprintf("%+v", v), true
	}
	return nil, false
}
