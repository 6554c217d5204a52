// Command loopfwd forwards TCP connections: each argument LISTEN=TARGET
// (host:port each) accepts on LISTEN and copies both ways to TARGET. The
// real-node test VM runs it to give pods the cluster's addresses that
// kube-proxy would give them (the kubernetes Service at 10.96.0.1:443 and
// a release mirror), forwarding to the host's loopback through qemu's user
// networking.
//
//	loopfwd 10.96.0.1:443=10.0.2.2:6443 10.96.0.2:80=10.0.2.2:8080
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loopfwd LISTEN=TARGET... (e.g. loopfwd 10.96.0.1:443=10.0.2.2:6443)")
		os.Exit(2)
	}
	for _, a := range os.Args[1:] {
		from, to, ok := strings.Cut(a, "=")
		if !ok {
			log.Fatalf("loopfwd: %q is not LISTEN=TARGET", a)
		}
		l, err := net.Listen("tcp", from)
		if err != nil {
			log.Fatalf("loopfwd: %v", err)
		}
		log.Printf("loopfwd: %s -> %s", from, to)
		go serve(l, to)
	}
	select {}
}

func serve(l net.Listener, to string) {
	for {
		c, err := l.Accept()
		if err != nil {
			log.Printf("loopfwd: accept: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go forward(c, to)
	}
}

func forward(c net.Conn, to string) {
	defer c.Close()
	t, err := net.DialTimeout("tcp", to, 10*time.Second)
	if err != nil {
		log.Printf("loopfwd: %s: %v", to, err)
		return
	}
	defer t.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(t, c)
	go cp(c, t)
	<-done
	<-done
}
