// Package config loads the host's configuration: built-in defaults, then a
// YAML file, then KVPILOT_* environment variables, each overriding the last.
//
// Loading is strict. An unknown key, a value of the wrong type or a value out
// of range fails at start with an error that names the key, so a typo never
// silently runs the host on a default.
//
// Environment variables map to keys by dropping the KVPILOT_ prefix,
// lower-casing, and reading "__" as the nesting separator:
// KVPILOT_HTTP__LISTEN sets http.listen, KVPILOT_TIERS__DEVICE__CAPACITY_PAGES
// sets tiers.device.capacity_pages. KVPILOT_CONFIG names the config file and
// is not itself a key.
package config

import (
	"time"
)

// Config is the whole host configuration. Field tags are the YAML keys.
type Config struct {
	// WorkerID is the Dynamo worker's instance id: the co-located Dynamo
	// worker's endpoint.connection_id(), which Dynamo's router knows it
	// by. It stamps every KV event and names the NATS subject
	// kv-control-<worker_id>. Environment: KVPILOT_WORKER_ID.
	WorkerID uint64 `koanf:"worker_id"`
	// DataDir holds the disk tier, the embedded NATS store, the audit log and
	// persisted metadata.
	DataDir string    `koanf:"data_dir"`
	Log     LogConfig `koanf:"log"`
	HTTP    HTTP      `koanf:"http"`
	Index   Index     `koanf:"index"`
	Tiers   Tiers     `koanf:"tiers"`
	Pins    Pins      `koanf:"pins"`
	Events  Events    `koanf:"events"`
	NATS    NATS      `koanf:"nats"`
	Control Control   `koanf:"control"`
	Engine  Engine    `koanf:"engine"`
	Gateway Gateway   `koanf:"gateway"`
	// Splice says what splices recompute of the tokens they keep.
	Splice Splice `koanf:"splice"`
	// Model, when set, opens the pools at start with this layout; without
	// it the pools open when an engine registers its layout.
	Model         Model         `koanf:"model"`
	Pools         Pools         `koanf:"pools"`
	Mover         Mover         `koanf:"mover"`
	PolicyRuntime PolicyRuntime `koanf:"policy_runtime"`
	// GCPercent sets the Go garbage collector's target (GOGC). The host's
	// heap is small and its latency budget tight, so it trades memory for
	// fewer collections; GOGC in the environment wins over this value.
	GCPercent int `koanf:"gc_percent"`
	// Policies is the set of policy plugins to run. Editing it in the config
	// file hot-swaps the set while the host keeps serving.
	Policies []Policy `koanf:"policies"`
}

// Policy is one policy plugin instance.
type Policy struct {
	// Name identifies the instance in logs, metrics and the audit log.
	Name string `koanf:"name"`
	// Builtin names a built-in policy run as `kvpilot policy <builtin>`
	// (truncation, think-evict, idle-pause, auto-pin). Exactly one of
	// Builtin and Path is set.
	Builtin string `koanf:"builtin"`
	// Path is an external plugin binary; SHA256 must be its hex digest.
	Path   string `koanf:"path"`
	SHA256 string `koanf:"sha256"`
	// Params is handed to the policy's Configure as JSON.
	Params map[string]any `koanf:"params"`
	// Tenants, when set, confines the policy to these tenants: it observes
	// only their requests and KV events (plus the host-wide ticks and tier
	// pressure), and a directive it emits for any other tenant is refused.
	// Empty: every tenant (a policy the operator trusts with all of them).
	Tenants []string `koanf:"tenants"`
}

// LogConfig selects the log level and format.
type LogConfig struct {
	// Level is trace, debug, info, warn or error.
	Level string `koanf:"level"`
	// Format is auto (JSON unless stderr is a terminal), json or text.
	Format string `koanf:"format"`
}

// HTTP is the metrics and health endpoint.
type HTTP struct {
	// Listen is host:port for /metrics and /healthz; empty disables it.
	Listen string `koanf:"listen"`
}

// Index configures the cache index. Block hashes are salted with the
// tenant's namespace: by default each tenant is its own
// namespace, so tenants never share pages.
type Index struct {
	// PageSize is tokens per page. An engine registers the same page size
	// or is refused (invalid_layout).
	PageSize int `koanf:"page_size"`
	// WritePolicy is the device tier's: write-through, write-back or none.
	WritePolicy string `koanf:"write_policy"`
	// PauseTier is where Pause keeps a session's pages: disk, host, or
	// remote (any worker sharing the remote bucket can resume it).
	PauseTier string `koanf:"pause_tier"`
	// SweepInterval is how often expired pins, retentions and leases are
	// swept (expiry is also applied lazily at every eviction scan).
	SweepInterval time.Duration `koanf:"sweep_interval"`
	// AutoSplice splices a session's cache when its next request edited
	// the history (session diff) instead of re-prefilling
	// everything after the edit. Off by default: it changes what a request
	// attends to (the amortize contract) without a directive asking.
	AutoSplice bool `koanf:"auto_splice"`
	// SinkTokens is the protected attention-sink prefix: no splice, evict
	// or auto-splice edits the first sink_tokens positions of a session,
	// since models lean on them whatever follows.
	SinkTokens int `koanf:"sink_tokens"`
	// NamespaceSalt salts block hashes with the tenant's namespace. Off,
	// every tenant hashes into one unsalted namespace: identical prefixes
	// are shared across tenants, and so are their pins, leases and pin
	// quota (Dynamo's behaviour without a cache namespace).
	NamespaceSalt bool `koanf:"namespace_salt"`
	// Share names shared namespaces and the tenants in each: the listed
	// tenants hash with the namespace's name instead of their own, so they
	// share prefixes (and pins, leases and quota) with each other only.
	Share map[string][]string `koanf:"share"`
}

// Tiers configures each tier's size, watermarks and pin budget.
type Tiers struct {
	Device Tier `koanf:"device"`
	Host   Tier `koanf:"host"`
	Disk   Tier `koanf:"disk"`
	Remote Tier `koanf:"remote"`
}

// Tier is one tier's capacity and eviction thresholds.
type Tier struct {
	// CapacityPages is the tier's size in pages; 0 disables the tier.
	CapacityPages int `koanf:"capacity_pages"`
	// HighWatermark is the used fraction at which eviction starts.
	HighWatermark float64 `koanf:"high_watermark"`
	// LowWatermark is the used fraction eviction brings the tier down to.
	LowWatermark float64 `koanf:"low_watermark"`
	// PinBudget is the largest fraction of the tier that pins may hold.
	PinBudget float64 `koanf:"pin_budget"`
}

// Events says where KV events go and in which form (Subject says on
// which NATS subject).
type Events struct {
	// Format is "dynamo" (the default): MessagePack RouterEvents in
	// Dynamo's event-plane envelope on
	// namespace.<namespace>.component.<component>.endpoint.<endpoint>.kv-events,
	// what Dynamo's KV router reads when its event plane is NATS
	// (--event-plane nats / DYN_EVENT_PLANE=nats); or "json": one plain
	// JSON RouterEvent per message on
	// namespace.<namespace>.component.<component>.kv-events, for tools.
	Format string `koanf:"format"`
	// Namespace, Component and Endpoint are the Dynamo worker's.
	Namespace string `koanf:"namespace"`
	Component string `koanf:"component"`
	Endpoint  string `koanf:"endpoint"`
	// DPRank is the Dynamo worker's data-parallel rank, reported with its
	// instance id (worker_id). Environment: KVPILOT_EVENTS__DP_RANK.
	DPRank uint32 `koanf:"dp_rank"`
	// PublisherID is the publisher_id in Dynamo's envelope; 0 picks a
	// random one at start, as Dynamo's publishers do.
	PublisherID uint64 `koanf:"publisher_id"`
	// DynamoFileKV, when set, is the root of Dynamo's file discovery store
	// (Dynamo's DYN_FILE_KV, --discovery-backend file). Dynamo's router
	// takes KV events only from publishers listed there, so the host lists
	// its publisher (for worker_id and dp_rank) at start and removes the
	// entry at stop. With etcd or Kubernetes discovery the listing must be
	// written by other means.
	DynamoFileKV string `koanf:"dynamo_file_kv"`
}

// Event formats (events.format).
const (
	EventsDynamo = "dynamo"
	EventsJSON   = "json"
)

// NATS selects the embedded server (the default) or an existing cluster,
// and configures the command plane on it.
type NATS struct {
	// URL of an existing cluster; empty starts the embedded server.
	URL          string `koanf:"url"`
	CredsFile    string `koanf:"creds_file"`
	NKeySeedFile string `koanf:"nkey_seed_file"`
	TLSCAFile    string `koanf:"tls_ca_file"`
	TLSCertFile  string `koanf:"tls_cert_file"`
	TLSKeyFile   string `koanf:"tls_key_file"`
	// Listen is the embedded server's client address; "" keeps it
	// in-process only.
	Listen string `koanf:"listen"`
	// WorkerSubject receives commands for this worker; {worker_id} is
	// replaced by config worker_id.
	WorkerSubject string `koanf:"worker_subject"`
	// BroadcastSubject receives commands for every worker.
	BroadcastSubject string `koanf:"broadcast_subject"`
	// JetStreamCommands makes commands durable and deduplicated by
	// Nats-Msg-Id, through a stream over both command subjects.
	JetStreamCommands bool `koanf:"jetstream_commands"`
	// CommandStream names that stream.
	CommandStream string `koanf:"command_stream"`
	// CommandReplicas is the command stream's replicas when it is created:
	// 3 on a three-node cluster keeps commands through a node's loss and a
	// rolling restart.
	CommandReplicas int `koanf:"command_replicas"`
	// RateLimit is commands per second per source; 0 disables limiting.
	RateLimit float64 `koanf:"rate_limit"`
	// RateBurst is the burst each source may send at once.
	RateBurst int `koanf:"rate_burst"`
	// TenantSubjects binds tenants to subjects: a command on
	// <worker_subject>.<tenant> or <broadcast_subject>.<tenant> acts for
	// that tenant only, and one on the bare subjects for the default
	// tenant only. The NATS server's per-user publish permissions then
	// decide who may act for which tenant.
	TenantSubjects bool `koanf:"tenant_subjects"`
	// Users, for the embedded server only, make it require an nkey of
	// every client and confine each user to its tenants' command subjects
	// (publish) and to replies and KV events (subscribe). They need
	// tenant_subjects. Empty: the server takes any client.
	Users []NATSUser `koanf:"users"`
}

// NATSUser is one client of the embedded server.
type NATSUser struct {
	// Name is for logs.
	Name string `koanf:"name"`
	// NKey is the user's public nkey ("U..."; `nk -gen user -pubout`
	// makes a pair); the client connects with the seed.
	NKey string `koanf:"nkey"`
	// Tenants it may command: "" is the default tenant (the bare
	// subjects), "*" every tenant.
	Tenants []string `koanf:"tenants"`
}

// Control is the gRPC kvpilot.v1.Control service on a Unix socket.
type Control struct {
	// Socket is the socket path; empty means <data_dir>/run/control.sock.
	Socket string `koanf:"socket"`
	// Group, when set, makes the socket 0660 owned by this group.
	Group string `koanf:"group"`
	// AllowUIDs are peer uids accepted besides the host's own.
	AllowUIDs []int `koanf:"allow_uids"`
	// Tenants binds peer uids (decimal keys) to the tenants they may act
	// for; "*" is every tenant. Empty: any allowed uid acts for any
	// tenant. Once one uid is listed, an unlisted uid acts for none.
	Tenants map[string][]string `koanf:"tenants"`
	// RateLimit is calls per second per peer uid; 0 disables limiting.
	RateLimit float64 `koanf:"rate_limit"`
	// RateBurst is the burst each uid may send at once.
	RateBurst int `koanf:"rate_burst"`
}

// Model describes a model's KV layout.
type Model struct {
	// Name is the model's name; empty means no model configured.
	Name string `koanf:"name"`
	// Attention is mha (K and V buffers; also GQA) or mla (one fused
	// [kv_c | k_pe] row).
	Attention string `koanf:"attention"`
	// DType is fp32, bf16, fp16, fp8_e4m3 or fp8_e5m2.
	DType  string `koanf:"dtype"`
	Layers int    `koanf:"layers"`
	// KVHeads and HeadDim shape an mha model's K and V rows.
	KVHeads int `koanf:"kv_heads"`
	HeadDim int `koanf:"head_dim"`
	// KVLoraRank is an mla model's kv_c width (512 for DeepSeek).
	KVLoraRank int `koanf:"kv_lora_rank"`
	// RopeDim is the rotated width per head (64 for DeepSeek's k_pe).
	RopeDim int `koanf:"rope_dim"`
	// RopeStyle is half_split (NeoX: Llama, Qwen; transformers'
	// DeepSeek-V3 k_pe) or interleaved (GPT-J; DeepSeek-V2's k_pe). Empty
	// means the attention's usual: half_split for mha, interleaved for mla.
	RopeStyle string `koanf:"rope_style"`
}

// Pools configures the tiers' backing memory and storage. Sizes come from
// tiers.*.capacity_pages.
type Pools struct {
	// DeviceBackend is auto (CUDA when a GPU is present, else memfd),
	// cuda or memfd.
	DeviceBackend string `koanf:"device_backend"`
	DeviceOrdinal int    `koanf:"device_ordinal"`
	// DiskDir holds page files; empty means <data_dir>/disk.
	DiskDir string `koanf:"disk_dir"`
	// DiskFsync is always, batch (one fsync per transfer batch) or never.
	DiskFsync        string `koanf:"disk_fsync"`
	DiskVerifyOnOpen bool   `koanf:"disk_verify_on_open"`
	// PersistOnStop bounds how long a graceful stop (SIGTERM) spends
	// writing the pages held only in memory (the device and host tiers;
	// in connector mode the staging tier) to the disk tier, most recent
	// first, so that a restart finds them; 0 writes nothing. A SIGKILL
	// loses only what was not written yet.
	PersistOnStop time.Duration `koanf:"persist_on_stop"`
	// RemoteBackend is where the remote tier keeps pages: jetstream (an
	// object store on the NATS server or cluster the host uses) or redis
	// (Redis or Valkey, see RemoteRedis).
	RemoteBackend string `koanf:"remote_backend"`
	// RemoteBucket is the object store (jetstream) or key prefix (redis)
	// shared by every host.
	RemoteBucket   string `koanf:"remote_bucket"`
	RemoteMaxBytes int64  `koanf:"remote_max_bytes"`
	// RemoteReplicas is a new JetStream bucket's replicas (a Redis
	// cluster's replicas are its own configuration).
	RemoteReplicas int         `koanf:"remote_replicas"`
	RemoteRedis    RemoteRedis `koanf:"remote_redis"`
}

// RemoteRedis configures the redis remote backend.
type RemoteRedis struct {
	// Addrs are host:port addresses; several name a cluster's nodes.
	Addrs []string `koanf:"addrs"`
	// Cluster speaks the cluster protocol with one address too.
	Cluster  bool   `koanf:"cluster"`
	Username string `koanf:"username"`
	// PasswordFile holds the password (its whitespace trimmed), so that it
	// stays out of the config and the environment.
	PasswordFile string `koanf:"password_file"`
}

// Mover configures tier transfers.
type Mover struct {
	Workers      int           `koanf:"workers"`
	Retries      int           `koanf:"retries"`
	RetryBackoff time.Duration `koanf:"retry_backoff"`
	DropWait     time.Duration `koanf:"drop_wait"`
	// StepInterval is how often the eviction planner runs.
	StepInterval time.Duration `koanf:"step_interval"`
}

// Pins configures TTLs and per-tenant quotas.
type Pins struct {
	// DefaultTTL applies when a pin names no TTL (300 s).
	DefaultTTL time.Duration `koanf:"default_ttl"`
	// MinTTL and MaxTTL clamp every requested TTL.
	MinTTL time.Duration `koanf:"min_ttl"`
	MaxTTL time.Duration `koanf:"max_ttl"`
	// TenantQuotaPages caps the pages one tenant may hold pinned; 0 means no
	// quota beyond the tier budgets.
	TenantQuotaPages int `koanf:"tenant_quota_pages"`
}

// Default returns the built-in configuration: a host that runs on one
// machine with nothing configured.
func Default() Config {
	return Config{
		WorkerID: 0,
		DataDir:  "kvpilot-data",
		Log:      LogConfig{Level: "info", Format: "auto"},
		HTTP:     HTTP{Listen: "127.0.0.1:9464"},
		Index: Index{
			PageSize:      64,
			WritePolicy:   "write-through",
			PauseTier:     "disk",
			SweepInterval: 5 * time.Second,
			AutoSplice:    false,
			SinkTokens:    4,
			NamespaceSalt: true,
		},
		Tiers: Tiers{
			Device: Tier{CapacityPages: 4096, HighWatermark: 0.95, LowWatermark: 0.85, PinBudget: 0.5},
			Host:   Tier{CapacityPages: 16384, HighWatermark: 0.95, LowWatermark: 0.85, PinBudget: 0.8},
			Disk:   Tier{CapacityPages: 65536, HighWatermark: 0.95, LowWatermark: 0.90, PinBudget: 0.9},
			Remote: Tier{CapacityPages: 262144, HighWatermark: 0.95, LowWatermark: 0.90, PinBudget: 0.9},
		},
		Events: Events{Format: EventsDynamo, Namespace: "dynamo", Component: "backend", Endpoint: "generate"},
		NATS: NATS{
			Listen:           "127.0.0.1:4222",
			WorkerSubject:    "kv-control-{worker_id}",
			BroadcastSubject: "kv-control-broadcast",
			CommandStream:    "KVPILOT_COMMANDS",
			CommandReplicas:  1,
			RateLimit:        1000,
			RateBurst:        200,
		},
		Control: Control{RateBurst: 1000},
		Gateway: DefaultGateway(),
		Splice:  Splice{Recompute: Recompute{Share: new(float64)}, Tenants: map[string]SpliceTenant{}},
		Engine:  Engine{LoadBackDeadline: 2 * time.Second, RequestTTL: 10 * time.Minute, MaxSessions: 65536},
		Model:   Model{Attention: "mha", DType: "bf16", RopeStyle: ""},
		Pools: Pools{DeviceBackend: "auto", DiskFsync: "batch", PersistOnStop: 10 * time.Second,
			RemoteBackend: "jetstream", RemoteBucket: "kvpilot-pages", RemoteReplicas: 1,
			RemoteRedis: RemoteRedis{Addrs: []string{}}},
		Mover:         Mover{Workers: 8, Retries: 2, RetryBackoff: 20 * time.Millisecond, DropWait: 5 * time.Second, StepInterval: 100 * time.Millisecond},
		GCPercent:     400,
		PolicyRuntime: PolicyRuntime{TickInterval: 10 * time.Second, CallTimeout: 2 * time.Second, QueueSize: 4096},
		Pins:          Pins{DefaultTTL: 300 * time.Second, MinTTL: time.Second, MaxTTL: 24 * time.Hour},
	}
}
