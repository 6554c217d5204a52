package release

import (
	"bytes"
	"strings"
	"testing"
)

const h1 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
const h2 = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

func TestParseSums(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Sums
		wantErr  bool
	}{
		{"text mode", h1 + "  k3os-rootfs-amd64.tar.gz\n", Sums{"k3os-rootfs-amd64.tar.gz": h1}, false},
		{"binary mode and ./", h1 + " *./k3os-initrd-amd64\n", Sums{"k3os-initrd-amd64": h1}, false},
		{"upper hex, CRLF, comments", "# sums\r\n\r\n" + strings.ToUpper(h2) + "  a\r\n", Sums{"a": h2}, false},
		{"same twice", h1 + "  a\n" + h1 + "  a\n", Sums{"a": h1}, false},
		{"conflict", h1 + "  a\n" + h2 + "  a\n", nil, true},
		{"short digest", "abc  a\n", nil, true},
		{"not hex", strings.Repeat("z", 64) + "  a\n", nil, true},
		{"no name", h1 + "  \n", nil, true},
		{"no separator", h1 + "\n", nil, true},
		{"empty", "", Sums{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSums(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && !equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseSumsTooLarge(t *testing.T) {
	big := strings.Repeat("# "+strings.Repeat("x", 100)+"\n", MaxSumsSize/100+10)
	if _, err := ParseSums(strings.NewReader(big)); err == nil {
		t.Fatal("want an error for an oversized checksum file")
	}
}

func TestFormatRoundTrip(t *testing.T) {
	in := Sums{"a": h1, "b c": h2}
	var buf bytes.Buffer
	if err := Format(&buf, in, []string{"a", "b c"}); err != nil {
		t.Fatal(err)
	}
	out, err := ParseSums(&buf)
	if err != nil || !equal(in, out) {
		t.Fatalf("round trip: %v, %v", out, err)
	}
}

// FuzzParseSums: never panics, and whatever parses formats back to the same sums.
func FuzzParseSums(f *testing.F) {
	f.Add(h1 + "  k3os-rootfs-amd64.tar.gz\n" + h2 + " *k3os-initrd-amd64\n")
	f.Fuzz(func(t *testing.T, in string) {
		sums, err := ParseSums(strings.NewReader(in))
		if err != nil {
			return
		}
		var names []string
		for n, s := range sums {
			if len(s) != 64 || n == "" {
				t.Fatalf("bad entry %q=%q", n, s)
			}
			names = append(names, n)
		}
		var buf bytes.Buffer
		_ = Format(&buf, sums, names)
		again, err := ParseSums(&buf)
		if err != nil {
			// names with newlines cannot round-trip; everything else must.
			for _, n := range names {
				if strings.ContainsAny(n, "\n\r") {
					return
				}
			}
			t.Fatalf("re-parse of formatted sums failed: %v", err)
		}
		if !equal(sums, again) {
			t.Fatalf("formatted sums parse back differently:\n%v\n%v", sums, again)
		}
	})
}

func equal(a, b Sums) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
