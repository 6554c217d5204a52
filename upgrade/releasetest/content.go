package releasetest

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"time"
)

// words make generated files compress like real binaries and text (about
// 3:1), rather than like random data.
var words = []string{
	"kernel", "module", "k3s", "containerd", "runc", "cni", "flannel", "coredns",
	"etcd", "apiserver", "kubelet", "proxy", "iptables", "overlay", "squashfs",
	"\x00\x00\x00\x00", "\x7fELF\x02\x01\x01", "GLIBC_2.17", "/usr/lib/", "0x00401000",
	"func", "return", "error", "nil", "{", "}", "\n", "\t", " ", "=", ";",
}

// fill writes size bytes: mostly word soup with one random 512-byte block
// in every 4 KiB.
func fill(w io.Writer, size int64, rng *rand.Rand) error {
	buf := make([]byte, 0, 64<<10)
	for size > 0 {
		buf = buf[:0]
		for len(buf) < cap(buf)-64 {
			if len(buf)%4096 < 64 && rng.IntN(4) == 0 {
				for i := 0; i < 512/8; i++ {
					v := rng.Uint64()
					buf = append(buf, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
				}
				continue
			}
			buf = append(buf, words[rng.IntN(len(words))]...)
		}
		n := int64(len(buf))
		if n > size {
			n = size
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		size -= n
	}
	return nil
}

// writeRootfs writes the rootfs tarball the way k3os packaged it:
//
//	<v>/k3os/system/k3os/<v>/{k3os, lib/...}   <v>/k3os/system/k3os/current -> <v>
//	<v>/k3os/system/k3s/<k3sv>/{k3s, k3s-install.sh}   <v>/k3os/system/k3s/current -> <k3sv>
//	<v>/sbin/{k3os,init,k3s,kubectl,...} links
func writeRootfs(w io.Writer, o Options, rng *rand.Rand) error {
	zw, err := gzip.NewWriterLevel(w, o.GzipLevel)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	t := tarWriter{tw: tw, mtime: time.Unix(1700000000, 0).UTC()}
	v, sys := o.Version, o.Version+"/k3os/system"
	k3os, k3s := sys+"/k3os/"+v, sys+"/k3s/"+o.K3sVersion
	for _, d := range []string{v, v + "/k3os", sys, sys + "/k3os", k3os, sys + "/k3s", k3s, v + "/sbin"} {
		t.dir(d)
	}
	t.file(k3os+"/k3os", 0o755, o.K3osBinary, 32<<10, rng)
	per := o.RootfsBytes / int64(o.RootfsFiles)
	for i := 0; i < o.RootfsFiles; i++ {
		dir := fmt.Sprintf("%s/lib/%02d", k3os, i/64)
		if i%64 == 0 {
			t.dir(k3os + "/lib")
			t.dir(dir)
		}
		t.file(fmt.Sprintf("%s/file-%05d.so", dir, i), 0o644, "", per, rng)
	}
	t.link(sys+"/k3os/current", v)
	t.file(k3s+"/k3s", 0o755, o.K3sBinary, o.K3sBytes, rng)
	t.file(k3s+"/k3s-install.sh", 0o755, "", 2<<10, rng)
	t.link(sys+"/k3s/current", o.K3sVersion)
	for _, l := range [][2]string{
		{"k3os", "/k3os/system/k3os/current/k3os"}, {"init", "k3os"},
		{"k3s", "/k3os/system/k3s/current/k3s"}, {"kubectl", "k3s"}, {"crictl", "k3s"}, {"ctr", "k3s"},
	} {
		t.link(v+"/sbin/"+l[0], l[1])
	}
	if t.err != nil {
		return t.err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

type tarWriter struct {
	tw    *tar.Writer
	mtime time.Time
	err   error
}

func (t *tarWriter) dir(name string) {
	t.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755})
}

func (t *tarWriter) link(name, target string) {
	t.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777})
}

func (t *tarWriter) header(h *tar.Header) {
	if t.err == nil {
		h.ModTime = t.mtime
		t.err = t.tw.WriteHeader(h)
	}
}

func (t *tarWriter) file(name string, mode int64, src string, size int64, rng *rand.Rand) {
	if t.err != nil {
		return
	}
	var f *os.File
	if src != "" {
		if f, t.err = os.Open(src); t.err != nil {
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if t.err = err; err != nil {
			return
		}
		size = fi.Size()
	}
	t.header(&tar.Header{Typeflag: tar.TypeReg, Name: path.Clean(name), Mode: mode, Size: size})
	if t.err != nil {
		return
	}
	if f != nil {
		_, t.err = io.Copy(t.tw, f)
		return
	}
	t.err = fill(t.tw, size, rng)
}
