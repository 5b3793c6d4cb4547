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
#                         opened by another process, and its page copies' bandwidth
#                         against the driver's copy from page-locked memory
#   host-pool-tiers.test  the pool set: auto picks the CUDA backend, pinned host tier
#   kvpilot-bench         `kvpilot bench rotate --device cuda` three times per model
#                         (gqa, mla): the splice's re-rotation against a
#                         device-to-device copy of the bytes it touches, with its
#                         target, where nvidia-smi names a GPU (JSON lines in
#                         rotate.jsonl, gathered under "rotate")
#
# Every binary that has benchmarks runs them three times (-test.count 3, 1 s
# each); the summary gives each one's MB/s as min, median and max, and its
# median over its baseline's: the first benchmark of its group (a group is
# the part of the name before "/" where there is one, else the package).
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
# nvidia-smi without a driver prints its complaint on stdout: trust it only
# when it succeeds.
if line=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null); then
	line=$(printf '%s\n' "$line" | head -n 1)
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
	if "./$bin" -test.list '^Benchmark' 2>/dev/null | grep -q '^Benchmark'; then
		echo "=== bench $name" >>"$log"
		timeout "$timeout_s" "./$bin" -test.run '^$' -test.bench . -test.benchtime 1s -test.count 3 >>"$log" 2>&1
		echo "=== exit bench $?" >>"$log"
	fi
done

rotate_exit=0
: >rotate.jsonl
if [ -x ./kvpilot-bench ] && [ -n "$gpu" ]; then
	for model in gqa mla; do
		for r in 1 2 3; do
			timeout "$timeout_s" ./kvpilot-bench rotate --device cuda --model "$model" --slots 32768 --iters 20 --json >>rotate.jsonl 2>>"$log" || rotate_exit=$?
		done
	done
fi

awk -v gpu="$gpu" -v driver="$driver" -v secs="$(($(date +%s) - start))" -v ran="$ran" -v rotate_exit="$rotate_exit" '
function q(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); gsub(/\t/, " ", s); return "\"" s "\"" }
function list(s) { return "[" s "]" }
# median of the n values v[k, 1..n], sorted in place
function median(k, n,   i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && v[k, j - 1] > v[k, j]; j--) { t = v[k, j]; v[k, j] = v[k, j - 1]; v[k, j - 1] = t }
	return n % 2 ? v[k, (n + 1) / 2] : (v[k, n / 2] + v[k, n / 2 + 1]) / 2
}
/^=== package / { pkg = $3; pkgs[++np] = pkg; next }
/^=== bench / { pkg = $3; next }
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
	for (i = 2; i <= NF; i++) if ($(i) == "MB/s") {
		name = $1; sub(/-[0-9]+$/, "", name); k = pkg SUBSEP name
		if (!(k in nv)) {
			order[++nb] = k
			group = pkg SUBSEP (index(name, "/") ? substr(name, 1, index(name, "/") - 1) : "")
			if (!(group in first)) first[group] = k
			base[k] = first[group]
		}
		v[k, ++nv[k]] = $(i - 1)
	}
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
	printf "],\"bench\":["
	for (i = 1; i <= nb; i++) { k = order[i]; med[k] = median(k, nv[k]) }
	for (i = 1; i <= nb; i++) {
		k = order[i]; split(k, kp, SUBSEP); split(base[k], bp, SUBSEP)
		printf "%s{\"package\":%s,\"name\":%s,\"runs\":%d,\"mb_per_s\":{\"min\":%.2f,\"median\":%.2f,\"max\":%.2f},\"baseline\":%s,\"vs_baseline\":%.3f}", (i > 1 ? "," : ""), q(kp[1]), q(kp[2]), nv[k], v[k, 1], med[k], v[k, nv[k]], q(bp[2]), (med[base[k]] > 0 ? med[k] / med[base[k]] : 0)
	}
	printf "],\"rotate\":["
	n = 0
	while ((getline line < "rotate.jsonl") > 0) if (line ~ /^\{/) printf "%s%s", (n++ ? "," : ""), line
	gpu_found = ran && nodriver == 0
	bad = total_fail > 0 || bench_exit != 0 || rotate_exit != 0
	printf "],\"rotate_exit\":%d,\"gpu_found\":%s,\"ok\":%s}\n", rotate_exit, (gpu_found ? "true" : "false"), ((!bad && gpu_found) ? "true" : "false")
	exit bad ? 1 : (ran ? 0 : 2)
}
' "$log"
