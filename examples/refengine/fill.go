package refengine

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/kvpilot/kvpilot/sdk/engineclient"
)

// FillServer runs the engine's side of fill orders: each order's
// replacement tokens are prefilled at their positions into the page slots
// the host named, exactly as the engine writes any prompt, so the splice
// contract check holds for filled rows too. Orders and Tokens count what
// it served (the prefill a splice still costs).
type FillServer struct {
	Orders atomic.Int64
	Tokens atomic.Int64
}

// ServeFills serves e's fill orders until ctx ends.
func (f *FillServer) ServeFills(ctx context.Context, e *Engine) error {
	ps := e.layout.PageSize
	return e.c.ServeFillOrders(ctx, func(_ context.Context, o engineclient.FillOrder) error {
		w := newWriter(&e.layout, e.rot, e.cfg.Seed)
		dev := e.c.Device()
		for i, tok := range o.Tokens {
			at := o.FirstOffset + i
			if at/ps >= len(o.PageSlots) {
				return fmt.Errorf("fill order %s: token %d at row %d past its %d pages", o.ID, i, at, len(o.PageSlots))
			}
			slot := int(o.PageSlots[at/ps])
			for layer := 0; layer < e.layout.Layers; layer++ {
				for buf := range e.layout.Buffers {
					row, err := dev.Row(slot, layer, buf, at%ps)
					if err != nil {
						return fmt.Errorf("fill order %s: %w", o.ID, err)
					}
					w.writeRow(row, tok, o.Position+i, layer, buf)
				}
			}
		}
		f.Orders.Add(1)
		f.Tokens.Add(int64(len(o.Tokens)))
		return nil
	})
}
