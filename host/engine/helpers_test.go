package engine_test

import "github.com/kvpilot/kvpilot/host/engine"

func enginetestFill(session string, pos int, toks, slots []uint32) engine.FillOrder {
	return engine.FillOrder{Session: session, Position: pos, Tokens: toks, PageSlots: slots}
}
