package preflight

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kvpilot/kvpilot/host/config"
	"github.com/kvpilot/kvpilot/host/layout"
	"github.com/kvpilot/kvpilot/host/pool/disk"
	"github.com/kvpilot/kvpilot/host/pool/slots"
)

// Sizes checks the tiers' sizes for layout l: the disk tier's page file
// against the free space of its filesystem, and what the pools hold in
// memory once open (the host tier's arena, the device tier's when
// deviceInRAM, and every pool's slot bookkeeping) against the memory the
// host may still use. The remote tier lives elsewhere and is not checked.
func Sizes(c config.Config, l *layout.Layout, deviceInRAM bool) error {
	return errors.Join(diskFits(c, l), memoryFits(c, l, deviceInRAM))
}

func diskFits(c config.Config, l *layout.Layout) error {
	pages := c.Tiers.Disk.CapacityPages
	if pages <= 0 {
		return nil
	}
	need := disk.FileBytes(l.PageBytes(), pages)
	free, err := diskFree(c.DiskDir())
	if err != nil {
		return nil // unknown here; the page file's own writes report it
	}
	// A page file this layout already has is reused, with its blocks.
	have := free + allocated(disk.PageFile(c.DiskDir(), l))
	if need <= have {
		return nil
	}
	return invalid("tiers.disk.capacity_pages", "%d pages of %s need %s on disk, and the filesystem of %s has %s free: "+
		"lower tiers.disk.capacity_pages to at most %d, or point pools.disk_dir at a larger filesystem",
		pages, size(layoutBytes(l)), size(need), c.DiskDir(), size(have), have/(need/int64(pages)))
}

// share is one tier's part of the pools' memory.
type share struct {
	key     string
	what    string
	bytes   int64
	perPage int64
}

func memoryFits(c config.Config, l *layout.Layout, deviceInRAM bool) error {
	pb := layoutBytes(l)
	var parts []share
	add := func(key string, pages int, arena bool, what string) {
		if pages <= 0 {
			return
		}
		per := int64(slots.BytesPerSlot)
		if arena {
			per += pb
		}
		b := int64(pages) * per
		parts = append(parts, share{key, fmt.Sprintf("%s %d pages, %s", what, pages, size(b)), b, per})
	}
	add("tiers.device.capacity_pages", c.Tiers.Device.CapacityPages, deviceInRAM, "device tier")
	add("tiers.host.capacity_pages", c.Tiers.Host.CapacityPages, true, "host tier")
	add("tiers.disk.capacity_pages", c.Tiers.Disk.CapacityPages, false, "disk tier's bookkeeping for")
	var need int64
	for _, p := range parts {
		need += p.bytes
	}
	have, source, err := memAvailable()
	if err != nil || need <= have {
		return nil // unknown here, or it fits
	}
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].bytes > parts[j].bytes })
	whats := make([]string, len(parts))
	for i, p := range parts {
		whats[i] = p.what
	}
	top := parts[0]
	advice := fmt.Sprintf("lower %s to at most %d", top.key, max(have-(need-top.bytes), 0)/top.perPage)
	if need-top.bytes >= have {
		advice = "lower " + top.key + " and the other tiers: without it they still need " + size(need-top.bytes)
	}
	return invalid(top.key, "the pools need %s of memory with pages of %s (%s), and this machine has %s available (%s): %s",
		size(need), size(pb), strings.Join(whats, "; "), size(have), source, advice)
}

// size writes n bytes for a person.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
