package agentmem

import (
	"debug/elf"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// UnmapBinary unmaps every page of this process's binary's read-only
// mappings (MADV_DONTNEED: the next touch maps the page again from the page
// cache, or reads it from the file). MADV_RANDOM before it stops the kernel
// from reading the neighbours of a read-only-data page faulted in again
// (executable mappings are read around whatever the advice). It returns the
// bytes of the mappings. The pages are clean copies of the file, which the
// kernel may drop itself at any time under memory pressure; this drops them
// sooner.
//
// Only a static binary's read-only pages are clean copies of the file: a
// dynamically linked one has relocated read-only data (RELRO) whose pages
// differ from the file, so for such a binary it unmaps nothing.
func UnmapBinary() (uintptr, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("find the binary: %w", err)
	}
	if dynamic, err := selfDynamic(); err != nil || dynamic {
		return 0, err
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("read the mappings: %w", err)
	}
	defer maps.Close()
	ranges, err := ReadOnlyMappings(maps, exe)
	if err != nil {
		return 0, fmt.Errorf("read the mappings: %w", err)
	}
	var n uintptr
	for _, r := range ranges {
		for _, advice := range []uintptr{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			// Not Go memory: a raw madvise rather than unix.Madvise's slice.
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.Len(), advice); errno != 0 {
				return n, fmt.Errorf("madvise %#x-%#x: %w", r.Start, r.End, errno)
			}
		}
		n += r.Len()
	}
	return n, nil
}

// selfDynamic is isDynamic of this process's binary, read once.
var selfDynamic = sync.OnceValues(func() (bool, error) { return isDynamic("/proc/self/exe") })

// isDynamic reports whether the ELF file at path is dynamically linked
// (has a PT_DYNAMIC segment: the loader relocates it at start).
func isDynamic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("read the binary's ELF headers: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			return true, nil
		}
	}
	return false, nil
}

// DropBinaryCache drops the pages of this process's binary that no process
// maps from the page cache (POSIX_FADV_DONTNEED), so that the memory they
// held is free, not only left out of RSS: the pages UnmapBinary unmapped and
// not touched since, and those the kernel read around a page fault.
func DropBinaryCache() error {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("open the binary: %w", err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop the binary's unmapped pages from the page cache: %w", err)
	}
	return nil
}
