package refengine_test

import (
	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

var errLayoutConflict = errcode.ErrLayoutConflict

func engineclientMatch(session string, toks []uint32) engineclient.MatchRequest {
	return engineclient.MatchRequest{Session: session, Tokens: toks}
}
