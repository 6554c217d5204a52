package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"slipway.dev/slipway/ops/plan"
)

// What each boot runs is recorded twice: on the Node (protocol's booted
// boot ID and versions), and in a file under Options.BootRecordDir, the
// host's /run/k3os, which every boot clears. A Node deleted and registered
// again (kubectl delete node; the kubelet comes back) loses the first; an
// agent restarted on the same boot then still finds the second, and does
// not take a swap staged since the boot began for what runs. The update
// operator's platform records its boots the same way.

// bootRecordFile is the record's name in BootRecordDir.
const bootRecordFile = "slipway-booted.json"

// bootRecord is what one boot runs.
type bootRecord struct {
	BootID string `json:"bootID"`
	Rootfs string `json:"rootfs"`
	Kernel string `json:"kernel,omitempty"`
	K3s    string `json:"k3s,omitempty"`
}

// readBootRecord is the record of boot, and false when there is none for
// it (no directory configured, no file, another boot's, unreadable).
func (a *Agent) readBootRecord(boot string) (plan.Versions, bool) {
	if a.opts.BootRecordDir == "" {
		return plan.Versions{}, false
	}
	b, err := os.ReadFile(filepath.Join(a.opts.BootRecordDir, bootRecordFile))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Warn("cannot read this boot's record; deciding what runs without it", "err", err)
		}
		return plan.Versions{}, false
	}
	var r bootRecord
	if err := json.Unmarshal(b, &r); err != nil || r.BootID != boot || r.Rootfs == "" {
		return plan.Versions{}, false
	}
	return plan.Versions{Rootfs: r.Rootfs, Kernel: r.Kernel, K3s: r.K3s}, true
}

// writeBootRecord records what boot runs, unless recorded already; a
// rename makes the record whole or absent.
func (a *Agent) writeBootRecord(boot string, v plan.Versions) error {
	if a.opts.BootRecordDir == "" {
		return nil
	}
	if have, ok := a.readBootRecord(boot); ok && have == v {
		return nil
	}
	b, err := json.Marshal(bootRecord{BootID: boot, Rootfs: v.Rootfs, Kernel: v.Kernel, K3s: v.K3s})
	if err != nil {
		return err
	}
	path := filepath.Join(a.opts.BootRecordDir, bootRecordFile)
	if err := os.MkdirAll(a.opts.BootRecordDir, 0o755); err != nil {
		return fmt.Errorf("record what this boot runs: %w", err)
	}
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("record what this boot runs: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("record what this boot runs: %w", err)
	}
	return nil
}
