package platform

import (
	"path/filepath"
	"sync"
	"testing"
)

// TestConcurrentBootRecords: readers of a fresh boot recording it at the
// same instant (the agent's turn and a status read) all succeed; with one
// fixed temporary name, one's rename found the file gone.
func TestConcurrentBootRecords(t *testing.T) {
	file := filepath.Join(t.TempDir(), bootRecordName)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- writeRecord(file, BootRecord{BootID: "b1"})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	left, _ := filepath.Glob(file + ".*")
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
