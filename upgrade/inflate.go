package upgrade

import (
	"io"

	"github.com/klauspost/compress/gzip"
)

// Inflating is the slowest step of staging a rootfs, so it runs in its own
// goroutine and hands over large blocks through a queue: it waits for the
// files to be written only when inflateBlocks blocks are already waiting.
// (Through an io.Pipe it handed over one 32 KiB window at a time and waited
// for every file's open and writeback to take it.) 2 MiB are about 8 ms of
// inflating, longer than a file takes to be created and written; blocks of
// 1 MiB measured no faster.
const (
	inflateBlocks    = 4
	inflateBlockSize = 512 << 10
)

// inflater decompresses a gzip stream in its own goroutine; Read returns
// the inflated bytes in order.
type inflater struct {
	full  chan []byte   // inflated blocks, in order; closed after the last
	free  chan []byte   // blocks read, to fill again
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the goroutine returns
	err   error         // why the stream ended (io.EOF at its end); set before full closes
	block []byte        // the block being read, whole
	rest  []byte        // its unread part
}

func inflate(r io.Reader) (*inflater, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	f := &inflater{
		full: make(chan []byte, inflateBlocks), free: make(chan []byte, inflateBlocks),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	for range inflateBlocks {
		f.free <- make([]byte, inflateBlockSize)
	}
	go f.run(zr)
	return f, nil
}

// run fills free blocks and queues them until the stream ends or Close.
func (f *inflater) run(zr *gzip.Reader) {
	defer close(f.done)
	for {
		var b []byte
		select {
		case b = <-f.free:
		case <-f.stop:
			return
		}
		n, err := fill(zr, b[:cap(b)])
		if n > 0 {
			select {
			case f.full <- b[:n]:
			case <-f.stop:
				return
			}
		}
		if err != nil {
			f.err = err
			close(f.full)
			return
		}
	}
}

// fill reads into b until it is full or the stream ends (io.EOF) or fails.
func fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Read copies inflated bytes into b; at the end of the stream it returns
// io.EOF, or the error that ended it (a corrupt or truncated stream).
func (f *inflater) Read(b []byte) (int, error) {
	for len(f.rest) == 0 {
		if f.block != nil {
			f.free <- f.block[:cap(f.block)] // never blocks: free holds every block
			f.block = nil
		}
		blk, ok := <-f.full
		if !ok {
			return 0, f.err
		}
		f.block, f.rest = blk, blk
	}
	n := copy(b, f.rest)
	f.rest = f.rest[n:]
	return n, nil
}

// Close stops the goroutine and waits for it.
func (f *inflater) Close() error {
	close(f.stop)
	<-f.done
	return nil
}
