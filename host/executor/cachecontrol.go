package executor

import (
	"context"
	"fmt"

	"github.com/kvpilot/kvpilot/sdk/directive"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// CacheControl applies a router cache_control request as a turn of one op
// and answers in the router's reply format. Counts are of requested blocks:
// "Pinned 2/3 blocks" means two of the three were cached and are pinned.
// evict_descendants counts the pages it removed.
func (e *Executor) CacheControl(ctx context.Context, source, tenant string, c directive.CacheControl) directive.CacheControlReply {
	worker := e.cfg.WorkerID
	refuse := func(err *errcode.Error) directive.CacheControlReply {
		e.audit([]Record{{Time: e.cfg.Now(), Source: source, Tenant: tenant, Index: 0, Verb: string(c.Action),
			Status: directive.StatusError, Code: err.Code, Detail: err.Error()}})
		return directive.ErrorReply(err, worker)
	}
	if err := ctx.Err(); err != nil {
		return refuse(errcode.Wrap(errcode.DeadlineExceeded, err, "before the request started"))
	}
	if err := c.Validate(e.cfg.Limits); err != nil {
		return refuse(errcode.From(err))
	}
	if c.WorkerID != "" && worker != "" && c.WorkerID != worker {
		return refuse(errcode.New(errcode.WrongWorker, "worker_id %s, this is %s", c.WorkerID, worker))
	}
	o, pg := cacheControlOp(c)
	o.base().verb = string(c.Action)
	reply := e.run(e.newTurn("", source, tenant, []op{o}))
	if !reply.OK() {
		err := *reply.Error
		err.Index = -1 // one op: "directive 0" would only confuse a router
		return directive.ErrorReply(&err, worker)
	}
	eff := reply.Results[0].Effect
	requested := len(c.BlockHashes)
	if c.Action.ByTokens() {
		requested = pg.total
	}
	var msg string
	switch c.Action {
	case directive.ActionPinBlocks, directive.ActionPinPrefix:
		msg = fmt.Sprintf("Pinned %d/%d blocks", eff.Blocks, requested)
	case directive.ActionUnpinBlocks, directive.ActionUnpinPrefix:
		msg = fmt.Sprintf("Unpinned %d/%d blocks", eff.Blocks, requested)
	case directive.ActionEvictDescendants:
		msg = fmt.Sprintf("Evicted %d descendant blocks of %d/%d blocks", eff.Blocks, requested-eff.Missing, requested)
	}
	if reply.Warning != "" {
		msg += "; warning: " + reply.Warning
	}
	out := directive.OKReply(c.Action, eff.Blocks, msg, worker)
	if c.Action.ByTokens() {
		total := pg.total
		out.TotalBlocks = &total
	}
	return out
}

// cacheControlOp is the op of a validated cache_control request, and the
// pages it names.
func cacheControlOp(c directive.CacheControl) (op, *pages) {
	byBlocks := pages{hashes: hashes(c.BlockHashes)}
	byTokens := pages{tokens: c.TokenIDs}
	switch c.Action {
	case directive.ActionPinBlocks:
		o := &pinOp{opBase: opBase{mode: "pin"}, pages: byBlocks, ttl: c.TTL}
		return o, &o.pages
	case directive.ActionPinPrefix:
		o := &pinOp{opBase: opBase{mode: "pin"}, pages: byTokens, ttl: c.TTL}
		return o, &o.pages
	case directive.ActionUnpinBlocks:
		o := &unpinOp{opBase: opBase{mode: "unpin"}, pages: byBlocks}
		return o, &o.pages
	case directive.ActionUnpinPrefix:
		o := &unpinOp{opBase: opBase{mode: "unpin"}, pages: byTokens}
		return o, &o.pages
	case directive.ActionEvictDescendants:
		o := &pruneOp{pages: byBlocks}
		return o, &o.pages
	}
	// Validate refuses any other action before it gets here.
	return &unsupportedOp{why: "unknown cache_control action"}, &pages{}
}

// CacheControlJSON decodes a cache_control request and applies it.
func (e *Executor) CacheControlJSON(ctx context.Context, source, tenant string, data []byte) directive.CacheControlReply {
	c, err := directive.DecodeCacheControl(data, e.cfg.Limits)
	if err != nil {
		e.audit([]Record{{Time: e.cfg.Now(), Source: source, Tenant: tenant, Verb: "cache_control",
			Status: directive.StatusError, Code: errcode.From(err).Code, Detail: err.Error()}})
		return directive.ErrorReply(err, e.cfg.WorkerID)
	}
	return e.CacheControl(ctx, source, tenant, c)
}
