package main

import (
	"os"
	"strings"
	"testing"
)

// TestLinksAreTheDockerfiles: the image without Docker carries the same
// multi-call names as the Dockerfile's image.
func TestLinksAreTheDockerfiles(t *testing.T) {
	b, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if want := "for n in " + strings.Join(Links, " ") + ";"; !strings.Contains(string(b), want) {
		t.Errorf("the Dockerfile does not link %q: keep ocipack.Links and the Dockerfile's names together", want)
	}
}
