package kvevent

import (
	"errors"
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// The MessagePack form is the one Dynamo's event plane carries (ai-dynamo
// 1.6.1; see envelope.go): an Event is a map keyed by field name, in the
// order Dynamo writes them,
//
//	{worker_id, storage_tier, residency_domain: "worker",
//	 event: {event_id, data, dp_rank}}
//
// where data is {"stored": {parent_hash, start_position: nil, blocks:
// [{block_hash, tokens_hash, mm_extra_info: nil}]}}, {"removed":
// {block_hashes}} or the string "cleared". The fields kvpilot has no use
// for (residency_domain, start_position, mm_extra_info) are written as
// Dynamo's own publisher writes them for a plain worker, and skipped when
// read. Integers are written in their shortest unsigned form.

// residencyDomain is what Dynamo's publisher reports for a worker's own
// cache.
const residencyDomain = "worker"

// maxCount bounds every length read from a peer's message, so a short
// message cannot make the decoder allocate for a huge claimed count.
const maxCount = 1 << 20

// AppendMsgpack appends ev in Dynamo's MessagePack form to b.
func AppendMsgpack(b []byte, ev *Event) []byte {
	b = msgp.AppendMapHeader(b, 4)
	b = msgp.AppendString(b, "worker_id")
	b = msgp.AppendUint64(b, ev.WorkerID)
	b = msgp.AppendString(b, "storage_tier")
	b = msgp.AppendString(b, ev.StorageTier)
	b = msgp.AppendString(b, "residency_domain")
	b = msgp.AppendString(b, residencyDomain)
	b = msgp.AppendString(b, "event")
	b = msgp.AppendMapHeader(b, 3)
	b = msgp.AppendString(b, "event_id")
	b = msgp.AppendUint64(b, ev.Event.EventID)
	b = msgp.AppendString(b, "data")
	b = appendData(b, &ev.Event.Data)
	b = msgp.AppendString(b, "dp_rank")
	b = msgp.AppendUint64(b, uint64(ev.Event.DPRank))
	return b
}

func appendData(b []byte, d *EventData) []byte {
	switch {
	case d.Stored != nil:
		b = msgp.AppendMapHeader(b, 1)
		b = msgp.AppendString(b, "stored")
		b = msgp.AppendMapHeader(b, 3)
		b = msgp.AppendString(b, "parent_hash")
		if d.Stored.ParentHash != nil {
			b = msgp.AppendUint64(b, *d.Stored.ParentHash)
		} else {
			b = msgp.AppendNil(b)
		}
		b = msgp.AppendString(b, "start_position")
		b = msgp.AppendNil(b)
		b = msgp.AppendString(b, "blocks")
		b = msgp.AppendArrayHeader(b, uint32(len(d.Stored.Blocks)))
		for _, blk := range d.Stored.Blocks {
			b = msgp.AppendMapHeader(b, 3)
			b = msgp.AppendString(b, "block_hash")
			b = msgp.AppendUint64(b, blk.BlockHash)
			b = msgp.AppendString(b, "tokens_hash")
			b = msgp.AppendUint64(b, blk.TokensHash)
			b = msgp.AppendString(b, "mm_extra_info")
			b = msgp.AppendNil(b)
		}
		return b
	case d.Removed != nil:
		b = msgp.AppendMapHeader(b, 1)
		b = msgp.AppendString(b, "removed")
		b = msgp.AppendMapHeader(b, 1)
		b = msgp.AppendString(b, "block_hashes")
		b = msgp.AppendArrayHeader(b, uint32(len(d.Removed.BlockHashes)))
		for _, h := range d.Removed.BlockHashes {
			b = msgp.AppendUint64(b, h)
		}
		return b
	}
	return msgp.AppendString(b, "cleared")
}

// ErrMsgpack is wrapped by every MessagePack decoding error.
var ErrMsgpack = errors.New("malformed MessagePack KV event")

// DecodeMsgpack reads one Event in Dynamo's MessagePack form from the start
// of b and returns the bytes after it. Unknown keys are skipped; a missing
// event or data is an error.
func DecodeMsgpack(b []byte) (Event, []byte, error) {
	var ev Event
	n, b, err := readMap(b)
	if err != nil {
		return ev, nil, fmt.Errorf("%w: event: %w", ErrMsgpack, err)
	}
	haveBody := false
	for range n {
		var key []byte
		if key, b, err = msgp.ReadStringZC(b); err != nil {
			return ev, nil, fmt.Errorf("%w: event key: %w", ErrMsgpack, err)
		}
		switch string(key) {
		case "worker_id":
			ev.WorkerID, b, err = msgp.ReadUint64Bytes(b)
		case "storage_tier":
			ev.StorageTier, b, err = msgp.ReadStringBytes(b)
		case "event":
			b, err = readBody(b, &ev.Event)
			haveBody = err == nil
		default:
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return ev, nil, fmt.Errorf("%w: %s: %w", ErrMsgpack, key, err)
		}
	}
	if !haveBody {
		return ev, nil, fmt.Errorf("%w: no event", ErrMsgpack)
	}
	return ev, b, nil
}

func readBody(b []byte, body *EventBody) ([]byte, error) {
	n, b, err := readMap(b)
	if err != nil {
		return nil, err
	}
	haveData := false
	for range n {
		var key []byte
		if key, b, err = msgp.ReadStringZC(b); err != nil {
			return nil, err
		}
		switch string(key) {
		case "event_id":
			body.EventID, b, err = msgp.ReadUint64Bytes(b)
		case "dp_rank":
			var r uint64
			r, b, err = msgp.ReadUint64Bytes(b)
			if err == nil && r > 1<<32-1 {
				err = fmt.Errorf("dp_rank %d is out of range", r)
			}
			body.DPRank = uint32(r)
		case "data":
			b, err = readData(b, &body.Data)
			haveData = err == nil
		default:
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	if !haveData {
		return nil, errors.New("no data")
	}
	return b, nil
}

func readData(b []byte, d *EventData) ([]byte, error) {
	if msgp.NextType(b) == msgp.StrType {
		s, rest, err := msgp.ReadStringBytes(b)
		if err != nil {
			return nil, err
		}
		if s != "cleared" {
			return nil, fmt.Errorf("%q: want \"cleared\" or a map", s)
		}
		*d = EventData{Cleared: true}
		return rest, nil
	}
	n, b, err := readMap(b)
	if err != nil {
		return nil, err
	}
	if n != 1 {
		return nil, fmt.Errorf("want exactly one of stored, removed; got %d keys", n)
	}
	key, b, err := msgp.ReadStringZC(b)
	if err != nil {
		return nil, err
	}
	switch string(key) {
	case "stored":
		s := &StoredData{}
		if b, err = readStored(b, s); err != nil {
			return nil, fmt.Errorf("stored: %w", err)
		}
		*d = EventData{Stored: s}
	case "removed":
		r := &RemovedData{}
		if b, err = readRemoved(b, r); err != nil {
			return nil, fmt.Errorf("removed: %w", err)
		}
		*d = EventData{Removed: r}
	default:
		return nil, fmt.Errorf("unknown kind %q", key)
	}
	return b, nil
}

func readStored(b []byte, s *StoredData) ([]byte, error) {
	n, b, err := readMap(b)
	if err != nil {
		return nil, err
	}
	s.Blocks = []StoredBlock{}
	for range n {
		var key []byte
		if key, b, err = msgp.ReadStringZC(b); err != nil {
			return nil, err
		}
		switch string(key) {
		case "parent_hash":
			if msgp.IsNil(b) {
				b, err = msgp.ReadNilBytes(b)
				s.ParentHash = nil
				break
			}
			var p uint64
			p, b, err = msgp.ReadUint64Bytes(b)
			s.ParentHash = &p
		case "blocks":
			var m uint32
			if m, b, err = readArray(b); err != nil {
				break
			}
			s.Blocks = make([]StoredBlock, 0, m)
			for range m {
				var blk StoredBlock
				if b, err = readBlock(b, &blk); err != nil {
					break
				}
				s.Blocks = append(s.Blocks, blk)
			}
		default:
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	return b, nil
}

func readBlock(b []byte, blk *StoredBlock) ([]byte, error) {
	n, b, err := readMap(b)
	if err != nil {
		return nil, err
	}
	for range n {
		var key []byte
		if key, b, err = msgp.ReadStringZC(b); err != nil {
			return nil, err
		}
		switch string(key) {
		case "block_hash":
			blk.BlockHash, b, err = msgp.ReadUint64Bytes(b)
		case "tokens_hash":
			blk.TokensHash, b, err = msgp.ReadUint64Bytes(b)
		default:
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	return b, nil
}

func readRemoved(b []byte, r *RemovedData) ([]byte, error) {
	n, b, err := readMap(b)
	if err != nil {
		return nil, err
	}
	r.BlockHashes = []uint64{}
	for range n {
		var key []byte
		if key, b, err = msgp.ReadStringZC(b); err != nil {
			return nil, err
		}
		if string(key) != "block_hashes" {
			if b, err = msgp.Skip(b); err != nil {
				return nil, err
			}
			continue
		}
		var m uint32
		if m, b, err = readArray(b); err != nil {
			return nil, fmt.Errorf("block_hashes: %w", err)
		}
		r.BlockHashes = make([]uint64, 0, m)
		for range m {
			var h uint64
			if h, b, err = msgp.ReadUint64Bytes(b); err != nil {
				return nil, fmt.Errorf("block_hashes: %w", err)
			}
			r.BlockHashes = append(r.BlockHashes, h)
		}
	}
	return b, nil
}

// readMap and readArray read a header and refuse a count the rest of the
// message cannot hold (every element is at least one byte).
func readMap(b []byte) (uint32, []byte, error) {
	n, rest, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return 0, nil, err
	}
	if n > maxCount || int(n) > len(rest)/2 {
		return 0, nil, fmt.Errorf("map of %d entries in %d bytes", n, len(rest))
	}
	return n, rest, nil
}

func readArray(b []byte) (uint32, []byte, error) {
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return 0, nil, err
	}
	if n > maxCount || int(n) > len(rest) {
		return 0, nil, fmt.Errorf("array of %d elements in %d bytes", n, len(rest))
	}
	return n, rest, nil
}
