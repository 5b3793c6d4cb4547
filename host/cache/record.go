package cache

import "unsafe"

// PageRecordBytes is the size of the record the index keeps for every
// cached page, before the maps and lists that find it. A cached page can
// never cost less, which makes it the floor that memory measurements
// (host/bench/cachebench) check themselves against, and the size their map
// baseline's values take.
const PageRecordBytes = unsafe.Sizeof(node{})
