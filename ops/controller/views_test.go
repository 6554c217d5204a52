package controller

import (
	"testing"

	"slipway.dev/slipway/ops/manifest"
	"slipway.dev/slipway/ops/protocol"
)

// TestViewPrefixMatchesTheManifest: the controller's Node policy admits
// exactly the annotations the controller writes.
func TestViewPrefixMatchesTheManifest(t *testing.T) {
	if protocol.AnnotationChannelViewPrefix != manifest.ChannelViewPrefix {
		t.Errorf("the controller writes views under %q, the manifest admits %q", protocol.AnnotationChannelViewPrefix, manifest.ChannelViewPrefix)
	}
}
