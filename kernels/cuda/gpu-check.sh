#!/bin/sh
# The GPU check (make gpu-check builds it into bin/gpu-check/, copied here as
# run.sh): runs the CUDA test binaries beside this script on the machine's
# GPU, with no network and no Go toolchain, and prints one JSON summary on
# stdout; their output goes to gpu-check.log beside it. Exit status 1 when a
# test failed, 2 when there was nothing to run.
#
#   kernels-cudadrv.test  the driver binding: memory, copies, pinned host memory, modules
#   kernels-cuda.test     the kernels against the CPU kernels bit for bit, and their
#                         bandwidth against a device-to-device copy (benchmarks)
#   host-pool-cuda.test   the CUDA device arena: pages in and out, the IPC handle
#                         opened by another process
#   host-pool-tiers.test  the pool set: auto picks the CUDA backend, pinned host tier
#
# Each binary gets at most GPU_CHECK_TIMEOUT (default 100s); the whole check
# stays under five minutes.
set -u
cd "$(dirname "$0")"
timeout_s="${GPU_CHECK_TIMEOUT:-100s}"
log=gpu-check.log
: >"$log"
start=$(date +%s)

gpu=""
driver=""
if command -v nvidia-smi >/dev/null 2>&1; then
	line=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
	gpu=$(printf '%s' "$line" | cut -d, -f1 | sed 's/^ *//; s/ *$//')
	driver=$(printf '%s' "$line" | cut -d, -f2 | sed 's/^ *//; s/ *$//')
fi

ran=0
for bin in *.test; do
	[ -x "$bin" ] || continue
	ran=1
	name=${bin%.test}
	echo "=== package $name" >>"$log"
	timeout "$timeout_s" "./$bin" -test.v -test.count=1 >>"$log" 2>&1
	echo "=== exit $name $?" >>"$log"
	if [ "$name" = kernels-cuda ]; then
		echo "=== bench $name" >>"$log"
		timeout "$timeout_s" "./$bin" -test.run '^$' -test.bench . -test.benchtime 10x -test.count=1 >>"$log" 2>&1
		echo "=== exit bench $?" >>"$log"
	fi
done

awk -v gpu="$gpu" -v driver="$driver" -v secs="$(($(date +%s) - start))" -v ran="$ran" '
function q(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); gsub(/\t/, " ", s); return "\"" s "\"" }
function list(s) { return "[" s "]" }
/^=== package / { pkg = $3; pkgs[++np] = pkg; next }
/^=== exit bench / { if ($4 != 0) { bench_exit = $4 } next }
/^=== exit / { if ($4 != 0 && failed[$3] == 0) { failed[$3]++; fails[$3] = q("exit status " $4) } next }
/^=== RUN / { msg = ""; next }
/^[ \t]+[a-z_]+\.go:[0-9]+: / { m = $0; sub(/^[ \t]+/, "", m); msg = m; next }
/^[ \t]*--- PASS: / { passed[pkg]++; next }
/^[ \t]*--- FAIL: / { failed[pkg]++; fails[pkg] = fails[pkg] (fails[pkg] ? "," : "") q($3 (msg != "" ? ": " msg : "")); next }
/^[ \t]*--- SKIP: / {
	skipped[pkg]++
	if (msg ~ /no CUDA driver/) nodriver++
	why[pkg] = why[pkg] (why[pkg] ? "," : "") q($3 ": " msg)
	next
}
/^Benchmark/ {
	for (i = 2; i <= NF; i++) if ($(i) == "MB/s") { name = $1; sub(/-[0-9]+$/, "", name); mbs[name] = $(i - 1); order[++nb] = name }
	next
}
END {
	printf "{\"gpu\":%s,\"driver\":%s,\"seconds\":%d,\"packages\":[", q(gpu), q(driver), secs
	total_fail = 0
	for (i = 1; i <= np; i++) {
		p = pkgs[i]
		total_fail += failed[p]
		printf "%s{\"name\":%s,\"passed\":%d,\"failed\":%d,\"skipped\":%d,\"failures\":%s,\"skips\":%s}", (i > 1 ? "," : ""), q(p), passed[p], failed[p], skipped[p], list(fails[p]), list(why[p])
	}
	printf "],\"bench_mb_per_s\":{"
	for (i = 1; i <= nb; i++) printf "%s%s:%s", (i > 1 ? "," : ""), q(order[i]), mbs[order[i]]
	printf "},\"vs_device_copy\":{"
	base = mbs["BenchmarkDeviceCopy"]; n = 0
	for (i = 1; i <= nb; i++) if (order[i] != "BenchmarkDeviceCopy" && base > 0) printf "%s%s:%.3f", (n++ ? "," : ""), q(order[i]), mbs[order[i]] / base
	gpu_found = ran && nodriver == 0
	printf "},\"gpu_found\":%s,\"ok\":%s}\n", (gpu_found ? "true" : "false"), ((total_fail == 0 && bench_exit == 0 && gpu_found) ? "true" : "false")
	exit (total_fail > 0 || bench_exit != 0) ? 1 : (ran ? 0 : 2)
}
' "$log"
