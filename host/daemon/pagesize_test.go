package daemon

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvpilot/kvpilot/sdk/engineclient"
	"github.com/kvpilot/kvpilot/sdk/enginewire"
	"github.com/kvpilot/kvpilot/sdk/errcode"
)

// index.page_size is the host's, and an engine must register the same:
// one with another page size is refused with invalid_layout naming the
// key, with or without a configured model. The commented example config
// says so (it once said an engine's registration overrides it).
func TestAnotherPageSizeIsRefusedAsTheExampleSays(t *testing.T) {
	b, err := os.ReadFile("../../examples/config/kvpilot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^  page_size:.*$`).FindString(string(b))
	if !strings.Contains(line, "refused") || strings.Contains(line, "overrides") {
		t.Errorf("the example's page_size comment does not say a registration with another page size is refused: %q", line)
	}
	for _, withModel := range []bool{false, true} {
		c := testConfig(t)
		if withModel {
			c = modelConfig(t)
		}
		c.Index.PageSize = 4
		d := startWithEngine(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := engineclient.Dial(ctx, engineclient.Options{Socket: d.cfg.EngineSocket(), EngineID: "other-pages",
			Layout: enginewire.Layout{Model: "tiny", PageSize: 8, DType: "bf16", Layers: 2,
				Buffers: []enginewire.Buffer{{Name: "k", Heads: 1, HeadDim: 8}, {Name: "v", Heads: 1, HeadDim: 8}},
				Rope:    &enginewire.RopeSlice{Buffer: 0, Offset: 0, Dim: 8, Style: "half_split"}},
			Rope: engineclient.RopeConfig{Base: 10000}})
		cancel()
		if !errors.Is(err, errcode.ErrInvalidLayout) || !strings.Contains(err.Error(), "index.page_size") {
			t.Errorf("model configured %v: an engine with 8-token pages on a 4-token host: %v", withModel, err)
		}
	}
}
