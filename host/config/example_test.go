package config

import (
	"reflect"
	"testing"
)

// The commented example config must load and spell out exactly the
// defaults, so it never drifts from the code.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	c, err := Load("../../examples/config/kvpilot.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Model.Layers, want.Model.KVHeads, want.Model.HeadDim, want.Model.RopeDim = 32, 8, 128, 128
	if len(c.Policies) == 0 {
		c.Policies = want.Policies
	}
	// nil and empty lists mean the same.
	if len(c.Control.AllowUIDs) == 0 {
		c.Control.AllowUIDs = want.Control.AllowUIDs
	}
	if len(c.Engine.AllowUIDs) == 0 {
		c.Engine.AllowUIDs = want.Engine.AllowUIDs
	}
	// nil and empty maps mean the same.
	if len(c.Index.Share) == 0 {
		c.Index.Share = want.Index.Share
	}
	if len(c.Control.Tenants) == 0 {
		c.Control.Tenants = want.Control.Tenants
	}
	if len(c.Gateway.Policies) == 0 {
		c.Gateway.Policies = want.Gateway.Policies
	}
	if len(c.Gateway.Tenants) == 0 {
		c.Gateway.Tenants = want.Gateway.Tenants
	}
	if len(c.NATS.Users) == 0 {
		c.NATS.Users = want.NATS.Users
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("example differs from defaults:\n got %+v\nwant %+v", c, want)
	}
}
