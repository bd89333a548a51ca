package clustertest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// MemReport is the test process's peak RSS (an in-process server runs in it, and so does
// whatever the test drives it with) and its Go memory, for a test's log.
func MemReport() string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	hwm := "unknown"
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				hwm = strings.TrimSpace(v)
			}
		}
	}
	return fmt.Sprintf("process peak RSS %s, Go heap in use %d MiB, Go sys %d MiB, goroutines %d",
		hwm, ms.HeapInuse>>20, ms.Sys>>20, runtime.NumGoroutine())
}
