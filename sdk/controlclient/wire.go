package controlclient

// The parts of the control wire contract that are not in the protos or the
// directive JSON: gRPC metadata keys on the Control socket and NATS headers
// on the command subjects. The host reads the same constants.
const (
	// MetadataSource names the caller in the audit log, after its uid:
	// "uds:uid=1000:<name>". At most 64 printable characters.
	MetadataSource = "kvpilot-source"
	// MetadataTenant restricts WatchEvents to one tenant's events.
	MetadataTenant = "kvpilot-tenant"

	// HeaderSource names the sender of a NATS command, for the audit log
	// and the per-source rate limit. Without it the host uses the
	// envelope's "source", then the reply inbox's prefix (one per client
	// connection), then "anonymous".
	HeaderSource = "Kvpilot-Source"
	// HeaderTenant sets the tenant of a NATS command; it overrides a turn
	// envelope's "tenant", and is the only way to give cache_control one.
	HeaderTenant = "Kvpilot-Tenant"
	// HeaderReply is where the host sends the result when the message's
	// own reply subject cannot carry it: in JetStream mode the reply
	// subject belongs to the stream (its PubAck), so a JetStream publisher
	// that wants the result sets this to an inbox it listens on.
	HeaderReply = "Kvpilot-Reply"
	// HeaderMsgID is NATS's deduplication header: JetStream drops a
	// command whose id it has seen within the stream's duplicate window.
	HeaderMsgID = "Nats-Msg-Id"
)
