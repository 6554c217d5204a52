// Package configmount writes a swarm worker's config into a directory the
// way the kubelet updates a ConfigMap volume, for tests and simulations
// that play the kubelet: each version in a new timestamped directory, the
// ..data symlink swapped to it atomically, and the key a link through
// ..data, so a reader sees the old file or the new, never half of one.
package configmount

import (
	"os"
	"path/filepath"

	swarmv1 "slipway.dev/slipway/ops/apis/swarm.slipway.dev/v1alpha1"
)

// Write makes text the config (swarmv1.ConfigMapKey) mounted in dir.
func Write(dir, text string) error {
	ts, err := os.MkdirTemp(dir, "..ts-")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ts, swarmv1.ConfigMapKey), []byte(text), 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	link := filepath.Join(dir, swarmv1.ConfigMapKey)
	if _, err := os.Lstat(link); err != nil {
		return os.Symlink(filepath.Join("..data", swarmv1.ConfigMapKey), link)
	}
	return nil
}
