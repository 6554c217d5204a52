package controller

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
)

// link is a TCP relay between a worker process and the API server that the
// test can cut, as a network partition would: while cut, connections are
// dropped and new ones closed at once.
type link struct {
	url    string
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func newLink(apiServer string) (*link, error) {
	u, err := url.Parse(apiServer)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	u.Host = ln.Addr().String()
	l.url = u.String()
	go l.serve()
	return l, nil
}

func (l *link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if l.cut.Load() {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns[c], l.conns[up] = true, true
		l.mu.Unlock()
		go l.pipe(c, up)
		go l.pipe(up, c)
	}
}

func (l *link) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	l.mu.Lock()
	delete(l.conns, dst)
	delete(l.conns, src)
	l.mu.Unlock()
}

// drop closes every open connection.
func (l *link) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.Close()
	}
}

func (l *link) close() {
	l.ln.Close()
	l.drop()
}
