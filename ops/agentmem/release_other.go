//go:build !linux

package agentmem

// UnmapBinary does nothing outside Linux.
func UnmapBinary() (uintptr, error) { return 0, nil }

// DropBinaryCache does nothing outside Linux.
func DropBinaryCache() error { return nil }
