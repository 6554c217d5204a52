package extract

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing f's dirty pages now,
// without waiting for them. A filesystem that does not support it is left
// to write back on its own schedule: the caller's flush still makes the
// data durable, so the error is not one.
func startWriteback(f *os.File) {
	_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
