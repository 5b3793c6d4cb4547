// Package tier names the four storage tiers a KV page can live on.
//
// The order is hot to cold: Device is the engine's own KV memory, Host is
// shared memory beside it, Disk is page files under the data dir, Remote is
// the JetStream object store shared by every host. Several packages (the cache
// index, pools, the mover, events) agree on these values, so they live here
// alone.
package tier

import "fmt"

// Tier is one storage tier. The zero value is Device.
type Tier uint8

const (
	Device Tier = iota
	Host
	Disk
	Remote
)

// Count is the number of tiers; arrays indexed by Tier have this length.
const Count = 4

// All lists the tiers hot to cold.
var All = [Count]Tier{Device, Host, Disk, Remote}

var names = [Count]string{"device", "host", "disk", "remote"}

// eventNames are the storage_tier strings of Dynamo's RouterEvent.
var eventNames = [Count]string{"device", "host_pinned", "disk", "external"}

// String returns the config and CLI name: device, host, disk, remote.
func (t Tier) String() string {
	if int(t) < Count {
		return names[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// EventName returns the storage_tier value used in KV events.
func (t Tier) EventName() string {
	if int(t) < Count {
		return eventNames[t]
	}
	return t.String()
}

// Valid reports whether t is one of the four tiers.
func (t Tier) Valid() bool { return int(t) < Count }

// Colder reports whether t is colder than u.
func (t Tier) Colder(u Tier) bool { return t > u }

// Parse accepts a config name or an event name, plus the AgenticCommand
// format's "GPU" and "CPU_TIER1" spellings used in Warm.target_tier.
func Parse(s string) (Tier, error) {
	for i := range names {
		if s == names[i] || s == eventNames[i] {
			return Tier(i), nil
		}
	}
	switch s {
	case "GPU":
		return Device, nil
	case "CPU_TIER1":
		return Host, nil
	}
	return 0, fmt.Errorf("unknown tier %q: want one of device, host, disk, remote", s)
}
